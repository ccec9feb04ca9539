"""torch's higher-order functions, recognised by identity inside traced code.

``torch.utils.checkpoint.checkpoint(fn, *args)`` is traced as the call ``fn(*args)``: its own
machinery (saved-tensor hooks, a recomputation in backward that runs ``fn`` again) cannot be
replayed from a graph, and tracing through it left a forward and a recomputation that saved
different tensors (backward then failed). Inlined, results and gradients equal eager's; the
memory saving of recomputing in backward is not kept (a later aot pass may mark the region).

``torch.cond(pred, true_fn, false_fn, operands)`` with a Python predicate calls the taken branch,
as eager torch.cond does; a tensor predicate is a graph break naming the construct.

``torch.func.functional_call`` swaps tensors into a module for one call; tracing that needs
temporary attribute writes on a real module, so it is a graph break with that reason.

``dispatch`` is consulted where Python functions are called (``calls._call_function``), after
the function's identity is guarded (the same guard as any inlined call: nothing extra).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.utils.checkpoint

from symbolic_vm import controls
from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.values import SymVar, TensorVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["dispatch", "is_higher_order"]

_Handler = Callable[["Interpreter", list[Var], dict[str, Var]], Var]

# checkpoint's own keywords; the rest go to the checkpointed function (non-reentrant only).
_CHECKPOINT_OPTIONS = frozenset(
    {"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop",
     "preserve_rng_state"}
)


def _call(vm: Interpreter, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    from symbolic_vm.calls import call

    return call(vm, fn, args, kwargs)


def _checkpoint(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    if not args:
        raise Unsupported("torch.utils.checkpoint.checkpoint() without a function")
    fn, fn_args = args[0], args[1:]
    fn_kwargs = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
    reentrant_var = kwargs.get("use_reentrant")
    # None (the default) means reentrant, with a warning, in torch 2.13.
    reentrant = reentrant_var is None or ops.const_value(out, reentrant_var) in (None, True)
    if "context_fn" in kwargs:
        context_fn = ops.const_value(out, kwargs["context_fn"])
        if context_fn is not torch.utils.checkpoint.noop_context_fn:
            raise Unsupported(
                "torch.utils.checkpoint.checkpoint with a context_fn (selective activation "
                "checkpointing) is not traced; it runs eagerly"
            )
    if reentrant and fn_kwargs:
        raise Unsupported("reentrant checkpoint with keyword arguments (eager raises ValueError)")
    if reentrant and torch.is_grad_enabled() and not any(
        isinstance(a, TensorVar) and bool(a.example.requires_grad) for a in fn_args
    ):
        # Eager's reentrant checkpoint is an autograd.Function: with no input that requires
        # grad, its outputs are cut from the parameters' gradients. Inlining would not cut them.
        raise Unsupported(
            "reentrant checkpoint where no input requires grad (its outputs then require no "
            "grad in eager); pass use_reentrant=False"
        )
    return _call(vm, fn, fn_args, fn_kwargs)


def _cond(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out = vm.out
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise Unsupported(f"torch.cond() got an unexpected argument {key!r}")
        bound[key] = value
    if not {"pred", "true_fn", "false_fn"} <= bound.keys():
        raise Unsupported("torch.cond() needs pred, true_fn and false_fn")
    pred = bound["pred"]
    if isinstance(pred, (TensorVar, SymVar)):
        raise Unsupported(
            "torch.cond with a tensor (or symbolic) predicate is not captured as one graph; "
            "it runs eagerly between graphs"
        )
    taken = bound["true_fn"] if ops.const_value(out, pred) else bound["false_fn"]
    operands = ops.items(out, bound["operands"]) if "operands" in bound else []
    return _call(vm, taken, operands, {})


def _functional_call(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    raise Unsupported(
        "torch.func.functional_call (swapping a module's tensors for one call) is not traced; "
        "it runs eagerly between graphs"
    )


def _table() -> dict[int, tuple[object, _Handler]]:
    if _TABLE:
        return _TABLE
    entries: list[tuple[object, _Handler]] = [
        (torch.utils.checkpoint.checkpoint, _checkpoint),
        # The undecorated function under torch's wrapper, should code reach it directly.
        (getattr(torch.utils.checkpoint.checkpoint, "__wrapped__", None), _checkpoint),
        (_TORCH_COND, _cond),
        (torch.func.functional_call, _functional_call),
        (getattr(torch.nn.utils.stateless, "functional_call", None), _functional_call),
    ]
    for fn, handler in entries:
        if fn is not None:
            _TABLE[id(fn)] = (fn, handler)
    return _TABLE


_TABLE: dict[int, tuple[object, _Handler]] = {}
_TORCH_COND: Any = getattr(torch, "cond", None)
_CHECKPOINT_IMPL: Any = getattr(torch.utils.checkpoint.checkpoint, "__wrapped__", None)
if isinstance(_CHECKPOINT_IMPL, types.FunctionType):
    # A checkpoint call that runs eagerly (its function breaks): a compiled forward and an
    # uncompiled recomputation would save different tensors, so neither is compiled (torch
    # disables its compiler under checkpoint the same way).
    controls.run_unhooked(_CHECKPOINT_IMPL.__code__)
if _TORCH_COND is not None:
    # Eager torch.cond (after a break, or in a frame run eagerly) compiles with torch's own
    # compiler: neither it nor anything it calls may be compiled by Strata too.
    controls.run_unhooked(_TORCH_COND.__code__)


def is_higher_order(fn: object) -> bool:
    """True if calling ``fn`` is handled here."""
    entry = _table().get(id(fn))
    return entry is not None and entry[0] is fn


def dispatch(vm: Interpreter, fn: object, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """The traced result of ``fn(*args, **kwargs)`` if ``fn`` is handled here; None if not."""
    entry = _table().get(id(fn))
    if entry is None or entry[0] is not fn:
        return None
    return entry[1](vm, args, kwargs)
