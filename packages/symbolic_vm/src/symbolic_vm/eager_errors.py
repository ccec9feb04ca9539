"""Eager's own error for a builtin call the VM could not model because its arguments are wrong.

A handler that meets arguments a builtin refuses (``isinstance(x, 3)``, ``len(n)`` on an int,
``x.size(5)`` on a 2-d tensor, ``{}[[n]]``) tends to fail inside its own code with an error
whose type or words are not eager's (``issubclass() arg 2 ...``, ``tuple index out of range``).
Rather than teach every handler every check, the call site (``calls.call``,
``object_model.getitem``) catches that error and asks the real callable: the call is made again
on the arguments' real values (constants, meta tensors with the tensors' metadata, containers of
those). What that raises is raised in the traced program, where its own ``except`` sees it, with
eager's type and message; when the real call succeeds the handler has a bug and its error goes
on as one. Arguments without a real value here (objects made in the trace, symbolic numbers)
make the call a graph break: it then runs eagerly and raises itself.

Only callables that run no user code and change nothing outside their arguments are asked
(``_PURE_BUILTIN_MODULES``, methods of builtin types, tensor methods that do not write), and
their arguments are copies (containers, meta tensors), so asking has no effect on the program.
"""

from __future__ import annotations

import builtins
import operator
import types
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm.constant_values import MadeObjectId, is_constant_value
from symbolic_vm.errors import (
    SymbolicVMError,
    Unsupported,
    throw,
    traced_at,
)
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    ListVar,
    MethodVar,
    ObjectVar,
    SetVar,
    SliceVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.output import Output

# What a handler raises when a builtin's arguments are not what it takes.
ARGUMENT_ERRORS: tuple[type[Exception], ...] = (
    TypeError, ValueError, LookupError, AttributeError, ArithmeticError,
)

# Modules whose C functions are pure on the values they are given.
_PURE_BUILTIN_MODULES = frozenset({"builtins", "math", "cmath", "_operator", "operator"})

# Builtins with effects outside their arguments (I/O, the interpreter's state), or that store
# on an argument: never called to learn their error.
_EFFECTFUL: frozenset[int] = frozenset(
    id(f)
    for f in (
        builtins.print, builtins.input, builtins.open, builtins.breakpoint, builtins.exec,
        builtins.eval, builtins.compile, builtins.__import__, builtins.setattr,
        builtins.delattr, builtins.globals, builtins.locals, builtins.vars, builtins.help,
    )
)

_HINT = (
    "eager most likely raises an error at this call (its arguments are not what it takes): fix "
    "the call, or compile without fullgraph=True, which runs it eagerly at a graph break"
)


class _NoRealValue(Exception):
    """An argument has no real value to call the builtin on."""


def _is_pure_callable(value: object) -> bool:
    if any(value is f for f in (builtins.type, builtins.object)):
        return True
    if isinstance(value, type):
        return value.__module__ == "builtins"
    if not isinstance(
        value,
        (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
         types.ClassMethodDescriptorType),
    ):
        return False
    if id(value) in _EFFECTFUL:
        return False
    owner = getattr(value, "__objclass__", None)
    if owner is not None:  # str.join, dict.get, list.index, ...
        return isinstance(owner, type) and owner.__module__ == "builtins"
    return getattr(value, "__module__", None) in _PURE_BUILTIN_MODULES


def _safe_class(cls: type) -> bool:
    """A class whose isinstance/issubclass checks run no Python code of a metaclass."""
    metaclass: type = type(cls)
    return not any(
        isinstance(k.__dict__.get(name), types.FunctionType)
        for k in metaclass.__mro__
        for name in ("__instancecheck__", "__subclasscheck__")
    )


def _real(out: Output, var: Var) -> Any:
    """The value ``var`` holds, to call a builtin on (guarding what it was read from)."""
    if isinstance(var, ConstVar):
        if not is_constant_value(var.value) or isinstance(var.value, MadeObjectId):
            raise _NoRealValue
        out.depend(var)
        return var.value
    if isinstance(var, TensorVar):
        out.depend(var)
        return _meta_like(var.example)
    if isinstance(var, TupleVar):
        if var.named_type is not None or var.is_size:
            raise _NoRealValue
        out.depend(var)
        return tuple(_real(out, v) for v in var.items)
    if isinstance(var, ListVar):
        out.depend(var)
        return [_real(out, v) for v in var.box.items]
    if isinstance(var, DictVar):
        out.depend(var)
        return {k: _real(out, v) for k, v in var.box.items.items()}
    if isinstance(var, SetVar):
        out.depend(var)
        return set(var.box.items)
    if isinstance(var, SliceVar):
        return slice(*(_real(out, p) for p in (var.start, var.stop, var.step)))
    if isinstance(var, ObjectVar) and (
        (isinstance(var.value, type) and _safe_class(var.value)) or _is_pure_callable(var.value)
    ):
        out.depend(var)
        return var.value
    raise _NoRealValue


def _meta_like(example: Any) -> torch.Tensor:
    """A meta tensor with the example's metadata: a torch.Tensor as eager's (a fake tensor's
    type would show in messages), on which asking changes nothing the trace holds."""
    sizes = (*example.shape, *example.stride())
    if example.layout != torch.strided or any(isinstance(s, torch.SymInt) for s in sizes):
        raise _NoRealValue
    meta = torch.empty_strided(
        tuple(example.shape), example.stride(), dtype=example.dtype, device="meta"
    )
    return meta.requires_grad_() if example.requires_grad else meta


def _real_callable(out: Output, fn: Var) -> Any:
    """The callable to ask, or None when ``fn`` is not one that may be called for its error."""
    if isinstance(fn, ObjectVar):
        return fn.value if _is_pure_callable(fn.value) else None
    if isinstance(fn, MethodVar) and isinstance(
        fn.self_var, (TensorVar, ConstVar, TupleVar, ListVar, DictVar, SetVar)
    ):
        method = getattr(_real(out, fn.self_var), fn.name, None)
        # C code, or torch's own Python (Tensor.__len__, split): never a user's method (an
        # Enum member's)
        func = getattr(method, "__func__", None)
        if isinstance(method, (types.BuiltinMethodType, types.MethodWrapperType)) or (
            isinstance(fn.self_var, TensorVar) and isinstance(func, types.FunctionType)
            and func.__module__.startswith("torch.")
        ):
            return method
    return None


def _name(fn: Var) -> str:
    if isinstance(fn, MethodVar):
        return f".{fn.name}"
    value = getattr(fn, "value", None)
    return str(getattr(value, "__name__", type(value).__name__))


def eager_error(
    out: Output, fn: Var, args: list[Var], kwargs: dict[str, Var], err: Exception
) -> SymbolicVMError | None:
    """What a call of ``fn`` whose handler failed with ``err`` raises in the trace.

    A TracedException with eager's error when the real callable, asked on the real values, raises
    one; an Unsupported (a graph break: the call then runs eagerly) when the arguments have no
    real value here; None when ``err`` is the VM's own bug (it came out of an inlined frame, the
    callable is not one to ask, or the real call succeeds): the caller re-raises it.
    """
    if traced_at(err):  # raised inside an inlined user frame: not about these arguments
        return None
    try:
        target = _real_callable(out, fn)
        if target is None:
            return None
        real_args = [_real(out, a) for a in args]
        real_kwargs = {k: _real(out, v) for k, v in kwargs.items()}
    except _NoRealValue:
        return Unsupported(
            f"{_name(fn)}() failed while tracing ({type(err).__name__}: {err}) on values it "
            "cannot ask eager about: the call runs eagerly",
            hint=_HINT,
        )
    return _ask(fn, target, real_args, real_kwargs)


def eager_getitem_error(out: Output, obj: Var, key: Var, err: Exception) -> SymbolicVMError | None:
    """``eager_error`` for ``obj[key]``."""
    return eager_error(out, ObjectVar(operator.getitem), [obj, key], {}, err)


def _ask(
    fn: Var, target: Any, args: list[Any], kwargs: dict[str, Any]
) -> SymbolicVMError | None:
    try:
        target(*args, **kwargs)
    except ARGUMENT_ERRORS as exc:
        return throw(type(exc), *exc.args)
    except Exception as exc:  # a meta tensor's own limits (data-dependent, ...)
        return Unsupported(
            f"{_name(fn)}() failed while tracing and its error depends on data "
            f"({type(exc).__name__}): the call runs eagerly",
            hint=_HINT,
        )
    return None  # the real call succeeds: the handler's error is a bug of ours
