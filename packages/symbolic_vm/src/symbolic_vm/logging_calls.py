"""A library's logging helper called with constant arguments: called after the graph, not a break.

Libraries install helpers on ``logging.Logger`` itself (transformers' ``warning_once``, an
``lru_cache`` over ``self.warning``; ``warning_advice``; ``info_once``). torch.compile breaks
the graph at every such call (any ``Logger`` method), so a model that warns in its attention
(``sdpa`` with ``output_attentions=True``) breaks once per attention call.

Here such a call is recorded as a side effect (``side_effects.DeferredCall``) and made by the
transformed code after the graph, in program order with the other replayed effects: the real
helper runs on every call, as eagerly, so its cache decides as eagerly whether it prints (once).
The logging record is the same as eager's: it names the helper's own line (the caller
``logging`` reports is the first frame outside ``logging``: the helper's). What moves is only
when it prints within one graph's stretch of code: after that graph's tensor work.

Only helpers that provably return None are deferred (every return of their function returns
the constant None, read from its bytecode: the trace continues with None as the result), with
positional arguments that are constants (strings, numbers). Logger's own methods
(``logger.warning``) are left alone: their record names the caller's line, which a call made
by the transformed code would change; they break, as under torch.compile.
"""

from __future__ import annotations

import dis
import functools
import inspect
import logging
import types
from typing import TYPE_CHECKING

from symbolic_vm.guard_api import AttrSource
from symbolic_vm.side_effects import DeferredCall
from symbolic_vm.values import BoundMethodVar, ConstVar, FunctionVar, ObjectVar, TupleVar, Var

if TYPE_CHECKING:
    from symbolic_vm.output import Output

__all__ = ["defer_logging_call"]

_PLAIN = (str, int, float, bool, bytes, type(None))


@functools.lru_cache(maxsize=256)
def _returns_none(code: types.CodeType) -> bool:
    """Every return of ``code`` returns the constant None (a generator never qualifies)."""
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return False
    previous = None
    for inst in dis.get_instructions(code):
        if inst.opname == "RETURN_CONST" and inst.argval is not None:
            return False
        if inst.opname == "RETURN_VALUE" and not (
            previous is not None and previous.opname == "LOAD_CONST" and previous.argval is None
        ):
            return False
        previous = inst
    return True


def _library_helper(logger_type: type, name: str, func: object) -> bool:
    """``func`` is what ``logger_type.<name>`` holds: a helper another module installed on
    ``logging.Logger`` (not a method of logging's own), returning None on every path."""
    if getattr(logger_type, name, None) is not func:
        return False  # a subclass overrides it
    target = inspect.unwrap(func)  # type: ignore[arg-type]  # lru_cache's __wrapped__
    if not isinstance(target, types.FunctionType) or target.__module__ == logging.__name__:
        return False
    return _returns_none(target.__code__)


def _plain(var: Var) -> bool:
    if isinstance(var, ConstVar):
        return type(var.value) in _PLAIN
    if isinstance(var, TupleVar):
        return all(_plain(v) for v in var.items)
    return False


def defer_logging_call(out: Output, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """``logger.<helper>(...)`` recorded to be called after the graph (None is its result in
    the trace); None where ``fn`` is no such call."""
    if isinstance(fn, ObjectVar):
        method = fn.value
        if type(method) is not types.MethodType or not isinstance(method.__self__, logging.Logger):
            return None
        logger, func = method.__self__, method.__func__
        receiver = fn.source.base_source if isinstance(fn.source, AttrSource) else None
    elif isinstance(fn, BoundMethodVar) and isinstance(fn.self_var, ObjectVar):
        logger = fn.self_var.value
        if not isinstance(logger, logging.Logger) or not isinstance(fn.func, FunctionVar):
            return None
        func = fn.func.fn
        receiver = fn.self_var.source
    else:
        return None
    # the name it is installed under on Logger (a helper's own __name__ may differ)
    name = next((k for k, v in vars(logging.Logger).items() if v is func), None)
    if receiver is None or name is None or not _library_helper(type(logger), name, func):
        return None
    if kwargs or not all(_plain(a) for a in args):
        return None  # keywords (exc_info=, stacklevel=) are left to the break
    # The logger is read again where the frame reads it when the call is made; the trace
    # assumed its class (which fixes the helper): guarded by type, as an instance the VM reads.
    out.request("TYPE_MATCH", receiver, logger)
    out.side_effects.append(DeferredCall(receiver, name, tuple(args)))
    return ConstVar(None)
