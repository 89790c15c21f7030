# Types for the parts of cloudpickle 3.1 that collnb uses (cloudpickle ships none): the signatures
# of cloudpickle/cloudpickle.py (Pickler, register_pickle_by_value, unregister_pickle_by_value).
import pickle
from types import ModuleType
from typing import IO, Any, Callable

from _pickle import _ReducedType  # typeshed's name for what a reducer returns

DEFAULT_PROTOCOL: int

class Pickler(pickle.Pickler):
    def __init__(self, file: IO[bytes], protocol: int | None = None,
                 buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None) -> None: ...
    def reducer_override(self, obj: object, /) -> _ReducedType: ...

def register_pickle_by_value(module: ModuleType) -> None: ...
def unregister_pickle_by_value(module: ModuleType) -> None: ...
def dumps(obj: Any, protocol: int | None = None,
          buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None) -> bytes: ...
