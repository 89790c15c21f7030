"""Executing a notebook as Run All in JupyterLab does, keeping the output nbclient would drop: what a
cell shows while another cell runs. The book (``make docs``) and tests/test_notebooks.py execute with
the same client, so the tests can take a notebook's execution from the book's cache and still check it.

nbclient keeps only the running cell's messages; JupyterLab shows a message under the cell its parent
header names (issue 34: after Run All, torch's warnings from a later cell of 12 showed under its first
``collnb.redistribute`` cell, sent there by ranks forked while that cell ran). :class:`RecordingClient`
is nbclient's ``NotebookClient`` with the same polling loop as its ``_async_poll_output_msg``, but a
stream, display, result or error message of another cell is appended to :attr:`RecordingClient.stray`
as ``[index of the cell running, message type, content]``.

:func:`record_in_the_book` makes jupyter-cache's execution (MyST-NB's ``nb_execution_mode = "cache"``,
docs/conf.py) use that client and store what it recorded in the executed notebook's metadata
(:data:`STRAY_KEY`, a list, empty when nothing strayed), so the book's execution cache carries it.
"""

from __future__ import annotations

from typing import Any

from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete
from nbclient.util import ensure_async

__all__ = ["STRAY_KEY", "RecordingClient", "execute", "record_in_the_book"]

#: The executed notebook's metadata key holding its stray output (a list of ``[cell index, message type,
#: content]``); absent from an execution made without :class:`RecordingClient`.
STRAY_KEY = "collnb_stray_outputs"

_STRAY_TYPES = ("stream", "display_data", "execute_result", "error")


class RecordingClient(NotebookClient):
    """nbclient's ``NotebookClient`` (the same arguments), recording in :attr:`stray` the output whose
    parent is not the running cell, as ``[index of the cell running, message type, content]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stray: list = []

    async def _async_poll_output_msg(self, parent_msg_id: str, cell: Any, cell_index: int) -> None:
        while True:
            msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=None))
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return
            elif msg["msg_type"] in _STRAY_TYPES:
                self.stray.append([cell_index, msg["msg_type"], msg["content"]])


def execute(nb: Any, cwd: str | None = None, km: Any = None, **kwargs: Any) -> Any:
    """``nbclient.execute`` with :class:`RecordingClient`: executes ``nb`` in place and sets
    ``nb.metadata[STRAY_KEY]`` to what strayed (also when a cell error or timeout ends the run)."""
    resources = {"metadata": {"path": cwd}} if cwd is not None else {}
    client = RecordingClient(nb=nb, resources=resources, km=km, **kwargs)
    try:
        return client.execute()
    finally:
        nb.metadata[STRAY_KEY] = client.stray


def record_in_the_book() -> None:
    """Make jupyter-cache (hence MyST-NB's cache mode) execute notebooks with :func:`execute`.

    jupyter-cache's ``single_nb_execution`` calls the name ``executenb`` of its module
    ``jupyter_cache.executors.utils`` (nbclient's ``execute``); that name is replaced. Call it in the
    Sphinx process before the (forked, ``-j 2``) readers start: docs/conf.py does.
    """
    import jupyter_cache.executors.utils as utils

    utils.executenb = execute  # type: ignore[assignment]
