"""The alpha-beta(-gamma) cost model of collective algorithms (:mod:`.model`: :func:`predict`,
:func:`closed_form`, :func:`round_costs`, algbw/busbw) and its parameters from measurements
(:mod:`.fitting`: :func:`calibrate`, :func:`fit`). Notebooks use it as ``collnb.costmodel``.

Imports no torch: the model, the closed forms and the fits need only numpy and the pure
schedules; :func:`calibrate` starts real ranks only when called.
"""

from .fitting import BUILTIN_FORM, Fit, calibrate, coefficients, crossovers, fit, fit_each
from .model import (DEFAULT_MODEL, CostModel, Prediction, algbw, busbw, busbw_factor, closed_form, predict,
                    round_costs)
from .tiers import TierPrediction, TwoTier, inter_node_bytes, predict_tiers, tier_round_costs

__all__ = ["CostModel", "Prediction", "DEFAULT_MODEL", "round_costs", "predict", "closed_form", "algbw",
           "busbw", "busbw_factor", "calibrate", "BUILTIN_FORM", "coefficients", "Fit", "fit", "fit_each",
           "crossovers", "TwoTier", "TierPrediction", "predict_tiers", "tier_round_costs", "inter_node_bytes"]
