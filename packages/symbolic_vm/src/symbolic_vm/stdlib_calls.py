"""Standard-library functions models call, answered by the VM instead of traced line by line
(registered in builtin_table's ``@implements`` table): ``inspect.signature`` of a function the
trace holds, ``id()`` of an object whose identity the guards pin; the attribute builtins
``vars(obj)`` and ``delattr``/``object.__delattr__`` (attr_stores.delattr_var).

Importing this module registers them (symbolic_vm.calls imports it).
"""

from __future__ import annotations

import builtins
import inspect
import types
from typing import TYPE_CHECKING

from symbolic_vm import attr_stores, attributes
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.constant_values import MadeObjectId
from symbolic_vm.errors import TracedException, Unsupported, throw
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DictVar,
    FunctionVar,
    GeneratorVar,
    IteratorVar,
    ListVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectVar,
    SetVar,
    TensorVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def _real(vm: Interpreter, var: Var) -> object:
    """The real object behind ``var``, pinned by identity: an ID_MATCH where it has a source;
    without one only classes, functions and modules (reached through guarded lookups)."""
    if isinstance(var, FunctionVar):
        value: object = var.fn
    elif isinstance(var, ModuleVar):
        value = var.module
    elif isinstance(var, ObjectVar):
        value = var.value
    else:
        raise Unsupported(f"the identity of {ops.describe(var)} is not known while tracing")
    if var.source is not None:
        vm.out.request("ID_MATCH", var.source, value)
    elif not isinstance(value, _STABLE):
        raise Unsupported(f"the identity of {ops.describe(var)} is not known while tracing")
    return value


_STABLE = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)


@implements(inspect.signature)
def _signature(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A signature is computed from the function alone (its code, defaults, annotations):
    the function is pinned by the guards, so its signature is a constant of the trace."""
    if len(args) != 1 or kwargs:
        raise Unsupported("inspect.signature with options")
    bound = args[0]
    target = _real(vm, bound.func if isinstance(bound, BoundMethodVar) else bound)
    try:
        signature = inspect.signature(target)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"{type(exc).__name__} raised by inspect.signature: {exc}") from exc
    if isinstance(bound, BoundMethodVar):
        # A bound method's signature leaves out its first parameter, as inspect does.
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return ObjectVar(signature)


@implements(id)
def _id(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``id(x)`` of an object the guards pin by identity: the same number on every call the
    code is reused for. An object whose identity the trace tracks itself (made while tracing,
    a container or tensor it holds by box or graph node) gets an ``output.MadeObjectId``:
    compared and hashed like its id, the number itself unknown."""
    (obj,) = args
    if isinstance(obj, ConstVar) and obj.value is None:
        return ConstVar(id(None))
    key = _tracked_identity(obj)
    if key is not None:
        return ConstVar(MadeObjectId(key))
    return ConstVar(id(_real(vm, obj)))


def _tracked_identity(var: Var) -> object | None:
    """What stands for ``var``'s identity in the trace, as ``operations.identical`` decides
    ``is`` (a box shared by aliases, a graph node); None when the identity is a real object's."""
    if isinstance(var, TensorVar):
        node: object = var.node
        return node
    if isinstance(var, (ListVar, DictVar, SetVar, NewObjectVar, IteratorVar, GeneratorVar)):
        return var.box
    if isinstance(var, NestedFunctionVar):
        return var.fn_dict
    return None


__all__: list[str] = []


# The standard-library models (one module per library): imported last, as they use this module.
from symbolic_vm import stdlib  # noqa: E402, F401


@implements(builtins.vars)
def _vars(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Unsupported("vars() without an argument (the caller's locals)")
    try:
        return attributes.getattr_var(vm, args[0], "__dict__")
    except TracedException as raised:
        if not isinstance(raised.exception, AttributeError):
            raise
        raise throw(TypeError, "vars() argument must have __dict__ attribute") from None


@implements(builtins.delattr)
def _delattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    attr_stores.delattr_var(vm, args[0], _attr_name(vm, args[1]))
    return ConstVar(None)


@implements(object.__delattr__)
def _object_delattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # Skips the class's own __delattr__, as object.__setattr__ skips its __setattr__.
    attr_stores.delattr_var(vm, args[0], _attr_name(vm, args[1]), through_object=True)
    return ConstVar(None)


def _attr_name(vm: Interpreter, var: Var) -> str:
    name = ops.const_value(vm.out, var)
    if not isinstance(name, str):
        raise throw(TypeError, f"attribute name must be string, not '{type(name).__name__}'")
    return name
