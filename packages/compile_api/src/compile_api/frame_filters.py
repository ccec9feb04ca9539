"""Which frames the callback passes over: those that cannot touch a tensor, and those called
under a frame past the cache limit, as torch.compile decides both.

torch.compile does not compile a frame whose arguments hold no tensor, module or ndarray and
whose code names no torch (or numpy) module among its globals: it runs such a frame as it is
and asks again at its next call. A function handed to ``compile()`` itself is always compiled.

The rule matters for counts and for work: a library's helper reached after a graph break with
only strings and ints (transformers' ``logger.warning_once(msg)``, a config check) would
otherwise be captured as a frame of its own, break on its logging or lock and be counted as
one more broken frame than torch.compile reports.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any

import torch

from .state import state

__all__ = ["always_compile", "called_past_limit", "frame_may_touch_tensors"]

# The code objects handed to compile() (or to a decorator of it): compiled whatever they hold.
_ALWAYS: weakref.WeakSet[types.CodeType] = weakref.WeakSet()


def always_compile(fn: Any) -> None:
    """Mark the code of ``fn`` (a function or a bound method) as compiled on every call."""
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        _ALWAYS.add(code)


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _holds_tensor(value: object, seen: dict[int, bool], np: Any) -> bool:
    """A tensor, a module (or module class), an ndarray, or exact lists, tuples, dicts and
    namedtuples holding one. Other objects count as holding none, as torch.compile counts them
    (a dict subclass such as transformers' ModelOutput included)."""
    key = id(value)
    if key in seen:
        return seen[key]
    seen[key] = False  # a container holding itself answers False while it is being read
    kind = type(value)
    if isinstance(value, torch.Tensor | torch.nn.Module) or (
        kind is type and issubclass(value, torch.nn.Module)  # type: ignore[arg-type]
    ) or (np is not None and (kind is np.ndarray or isinstance(value, np.generic))):
        found = True
    elif kind is list or kind is tuple:
        found = any(_holds_tensor(item, seen, np) for item in value)  # type: ignore[attr-defined]
    elif kind is dict:
        # a copy of the values: reading must not fail on a dict another thread changes
        found = any(_holds_tensor(item, seen, np) for item in list(value.values()))  # type: ignore[attr-defined]
    elif _is_namedtuple(value):
        found = any(_holds_tensor(getattr(value, f), seen, np) for f in type(value)._fields)  # type: ignore[attr-defined]
    else:
        found = False
    seen[key] = found
    return found


def _names_torch_module(code: types.CodeType, f_globals: dict[str, Any]) -> bool:
    for name in code.co_names:
        obj = f_globals.get(name)
        if isinstance(obj, types.ModuleType):
            module = obj.__name__
            if obj is torch or module.startswith("torch."):
                return True
            if module == "numpy" or module.startswith("numpy."):
                return True
    return False


def frame_may_touch_tensors(frame: types.FrameType, f_locals: dict[str, Any]) -> bool:
    """Whether ``frame`` (not started; ``f_locals`` its arguments) is compiled: its code was
    handed to compile(), it names a torch or numpy module global, or an argument holds a
    tensor, a module or an ndarray."""
    code = frame.f_code
    if code in _ALWAYS or _names_torch_module(code, frame.f_globals):
        return True
    seen: dict[int, bool] = {}
    np = sys.modules.get("numpy")  # not imported: no ndarray exists
    return any(_holds_tensor(value, seen, np) for value in f_locals.values())


def called_past_limit(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs under a frame that hit the cache size limit and runs eagerly.

    Such a frame runs its original code object (a compiled entry runs a transformed one): as
    torch.compile does, the functions it calls are not compiled either, on this call (each
    would otherwise compile its own graphs, as many times as the caller's inputs vary).
    """
    caller = frame.f_back
    while caller is not None:
        if caller.f_code in state.past_limit:
            return True
        caller = caller.f_back
    return False
