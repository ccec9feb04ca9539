"""Operators on instances of user classes, dispatched the way CPython's number and rich-compare
slots dispatch them (``Objects/abstract.c``'s binary_op1, ``typeobject.c``'s slot functions,
``object.c``'s do_richcompare), with each Python dunder method traced as a call:

- ``a + b``: ``type(a).__add__(a, b)``, then ``type(b).__radd__(b, a)`` when the first gives
  NotImplemented (or is missing); when ``type(b)`` is a proper subclass of ``type(a)`` that
  overrides ``__radd__``, the reflected method goes first. Both NotImplemented: TypeError.
- ``a += b``: ``type(a).__iadd__(a, b)``, then as ``a + b``.
- ``a < b``: ``__lt__``, then the reflected ``__gt__`` of ``b`` (first for a subclass); ``==``
  and ``!=`` end in identity, the others in TypeError. object's own ``__ne__`` inverts the
  class's ``__eq__``.
- ``-a``, ``+a``, ``~a``, ``abs(a)``: ``__neg__``, ``__pos__``, ``__invert__``, ``__abs__``.

A builtin operand (a constant, a tensor, a list, ...) answers NotImplemented to an instance of a
user class, as int, str and Tensor do. Anything this cannot model exactly (a class with
``__torch_function__``, an operator a C base class implements, a sequence's fallback to
repetition) returns None: the caller's own rules then apply.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from symbolic_vm import operations as ops
from symbolic_vm import type_trackers
from symbolic_vm.attr_stores import MISSING, class_lookup
from symbolic_vm.errors import throw
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    ListVar,
    NewObjectVar,
    ObjectVar,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
    builtin_value,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

_NAMES = {
    "+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod",
    "**": "pow", "@": "matmul", "&": "and", "|": "or", "^": "xor", "<<": "lshift",
    ">>": "rshift",
}
_REFLECTED_COMPARE = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_COMPARE_NAMES = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_UNARY_NAMES: dict[Callable[[Any], Any], tuple[str, str]] = {
    operator.neg: ("__neg__", "unary -"), operator.pos: ("__pos__", "unary +"),
    operator.invert: ("__invert__", "unary ~"), operator.abs: ("__abs__", "abs()"),
}
# Values whose operators answer NotImplemented to an instance of a user class.
_BUILTIN_OPERANDS = (ConstVar, TensorVar, SymVar, TupleVar, ListVar, DictVar, SetVar)
_PLAIN_CONSTANTS = frozenset({int, float, bool, complex, str, bytes, type(None)})
_OBJECT_SLOTS = frozenset(
    getattr(object, f"__{name}__") for name in ("eq", "ne", "lt", "le", "gt", "ge")
)


class _NotMine(Exception):
    """An operand this module cannot model exactly: the caller's rules apply."""


def _cls(vm: Interpreter, var: Var) -> type | None:
    """The user class dispatched on, None for a builtin operand; _NotMine for anything else
    (a module, a class with ``__torch_function__``, an object of a C class)."""
    cls = type_trackers.user_class(var)
    if cls is None:
        if isinstance(var, ConstVar) and type(var.value) not in _PLAIN_CONSTANTS:
            raise _NotMine  # an enum member, a torch.Size, ...: their own operators
        if isinstance(var, _BUILTIN_OPERANDS):
            return None
        raise _NotMine
    if class_lookup(cls, "__torch_function__") is not MISSING:
        raise _NotMine
    return cls


def _method(vm: Interpreter, var: Var, cls: type | None, name: str) -> Any:
    """The Python function ``type(var).name`` (guarded), None when the class does not define
    it (a builtin operand: its C method answers NotImplemented); _NotMine for a C method."""
    if cls is None:
        return None
    found = class_lookup(cls, name)
    if found is MISSING:
        return None
    if any(found is slot for slot in _OBJECT_SLOTS):
        return found
    if not isinstance(found, types.FunctionType):
        raise _NotMine
    method = type_trackers.python_method(vm, var, name)
    assert method is found
    return found


def _call(vm: Interpreter, method: Any, this: Var, other: Var) -> Var:
    if method is object.__eq__:
        return ConstVar(True) if ops.identical(vm.out, this, other) else ConstVar(NotImplemented)
    if method is object.__ne__:
        # object's __ne__ asks the class's __eq__ and inverts a real answer.
        eq = _method(vm, this, type_trackers.user_class(this), "__eq__")
        found = _call(vm, eq, this, other) if eq is not None else ConstVar(NotImplemented)
        if _not_implemented(found):
            return found
        return ConstVar(not ops.truth(vm.out, found))
    if any(method is slot for slot in _OBJECT_SLOTS):
        return ConstVar(NotImplemented)
    return vm.call(vm.out.wrap(method, None), [this, other], {})


def _not_implemented(var: Var) -> bool:
    return isinstance(var, (ConstVar, ObjectVar)) and var.value is NotImplemented


def _type_name(vm: Interpreter, var: Var) -> str:
    cls = type_trackers.user_class(var)
    if cls is not None:
        return cls.__name__
    if isinstance(var, TensorVar):
        return "Tensor"
    if isinstance(var, SymVar):
        return type(var.example).__name__.removeprefix("Sym").lower()
    if isinstance(var, ConstVar):
        return type(var.value).__name__
    return {TupleVar: "tuple", ListVar: "list", DictVar: "dict", SetVar: "set"}[type(var)]


def _involved(a: Var, b: Var) -> bool:
    return isinstance(a, (NewObjectVar, ObjectVar)) or isinstance(b, (NewObjectVar, ObjectVar))


def binary(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var | None:
    """``a <symbol> b`` (BINARY_OP's symbols, in-place ones included) when either operand is
    an instance of a user class; None otherwise."""
    if not _involved(a, b):
        return None
    try:
        return _binary(vm, symbol, a, b)
    except _NotMine:
        return None


def _binary(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var | None:
    in_place = symbol.endswith("=")
    plain = symbol.removesuffix("=") if in_place else symbol
    name = _NAMES[plain]
    ca, cb = _cls(vm, a), _cls(vm, b)
    if ca is None and cb is None:
        return None
    if ca is None and (
        (plain == "%" and isinstance(a, ConstVar) and isinstance(a.value, (str, bytes)))
        or (in_place and isinstance(a, (TensorVar, DictVar, SetVar)))
        or (symbol == "+=" and isinstance(a, ListVar))
    ):
        raise _NotMine  # formatting, a builtin's own in-place method, list.extend
    if plain == "*" and any(
        cls is not None and _sequence_name(seq) is not None
        and class_lookup(cls, "__index__") is not MISSING
        for cls, seq in ((ca, b), (cb, a))
    ):
        raise _NotMine  # a sequence repeated by a user __index__
    if in_place:
        method = _method(vm, a, ca, f"__i{name}__")
        if method is not None:
            found = _call(vm, method, a, b)
            if not _not_implemented(found):
                return found
    forward = _method(vm, a, ca, f"__{name}__")
    reflected = _method(vm, b, cb, f"__r{name}__") if cb is not ca else None
    if (
        reflected is not None and ca is not None and cb is not None and issubclass(cb, ca)
        and reflected is not class_lookup(ca, f"__r{name}__")
    ):
        found = _call(vm, reflected, b, a)
        if not _not_implemented(found):
            return found
        reflected = None
    for method, this, other in ((forward, a, b), (reflected, b, a)):
        if method is not None:
            found = _call(vm, method, this, other)
            if not _not_implemented(found):
                return found
    raise throw(TypeError, _sequence_error(vm, plain, a, b) or (
        f"unsupported operand type(s) for {symbol}: '{_type_name(vm, a)}' and "
        f"'{_type_name(vm, b)}'"
    ))


def _sequence_error(vm: Interpreter, plain: str, a: Var, b: Var) -> str | None:
    """The error of a sequence's own ``+``/``*`` (tried after both operators gave
    NotImplemented): concatenation with the left operand, repetition by the other one."""
    ca, cb = type_trackers.user_class(a), type_trackers.user_class(b)
    if plain == "*":
        if ca is None and _sequence_name(a) is not None:
            counted = b
        elif cb is None and _sequence_name(b) is not None:
            counted = a
        else:
            return None
        return f"can't multiply sequence by non-int of type '{_type_name(vm, counted)}'"
    seq = _sequence_name(a) if plain == "+" and ca is None else None
    if seq is None:
        return None
    if seq == "bytes":
        return f"can't concat {_type_name(vm, b)} to bytes"
    return f'can only concatenate {seq} (not "{_type_name(vm, b)}") to {seq}'


def _sequence_name(var: Var) -> str | None:
    if isinstance(var, ConstVar) and isinstance(var.value, (str, bytes)):
        return type(var.value).__name__
    if isinstance(var, TupleVar):
        return "tuple"
    if isinstance(var, ListVar):
        return "list"
    return None


def compare(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var | None:
    """``a <symbol> b`` (COMPARE_OP) when either operand is an instance of a user class."""
    if not _involved(a, b):
        return None
    try:
        return _compare(vm, symbol, a, b)
    except _NotMine:
        return None


def _compare(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var | None:
    ca, cb = _cls(vm, a), _cls(vm, b)
    if ca is None and cb is None:
        return None
    forward = _method(vm, a, ca, f"__{_COMPARE_NAMES[symbol]}__")
    reflected_name = f"__{_COMPARE_NAMES[_REFLECTED_COMPARE[symbol]]}__"
    reflected = _method(vm, b, cb, reflected_name)
    first = (
        ca is not None and cb is not None and cb is not ca and issubclass(cb, ca)
        and reflected is not None
    )
    order = [(reflected, b, a), (forward, a, b)] if first else [(forward, a, b), (reflected, b, a)]
    for method, this, other in order:
        if method is not None:
            found = _call(vm, method, this, other)
            if not _not_implemented(found):
                return found
    if symbol in ("==", "!="):
        same = ops.identical(vm.out, a, b)
        return ConstVar(same if symbol == "==" else not same)
    raise throw(
        TypeError,
        f"'{symbol}' not supported between instances of '{_type_name(vm, a)}' and "
        f"'{_type_name(vm, b)}'",
    )


def unary(vm: Interpreter, fn: Callable[[Any], Any], a: Var) -> Var | None:
    """``-a``, ``+a``, ``~a``, ``abs(a)`` on an instance of a user class; None otherwise."""
    if not isinstance(a, (NewObjectVar, ObjectVar)) or fn not in _UNARY_NAMES:
        return None
    name, what = _UNARY_NAMES[fn]
    try:
        cls = _cls(vm, a)
        if cls is None:
            return None
        method = _method(vm, a, cls, name)
    except _NotMine:
        return None
    if method is None:
        raise throw(TypeError, f"bad operand type for {what}: '{cls.__name__}'")
    return vm.call(vm.out.wrap(method, None), [a], {})


def binary_op(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var:
    """``a <symbol> b`` on any tracked values (BINARY_OP, ``operator.add``, ``sum``)."""
    found = binary(vm, symbol, a, b)
    if found is not None:
        return found
    # An instance of a tuple/set subclass whose class leaves the operator to its C base: the
    # base's operator on the tuple/set it is (``s | t`` is a plain set, as CPython's); an
    # in-place one changes that set and gives back the instance itself.
    plain_a = builtin_value(a)
    result = ops.binary(vm.out, symbol, plain_a, builtin_value(b))
    return a if result is plain_a and plain_a is not a else result


def compare_op(vm: Interpreter, symbol: str, a: Var, b: Var) -> Var:
    """``a <symbol> b`` on any tracked values (COMPARE_OP, ``operator.lt``, ...)."""
    found = compare(vm, symbol, a, b)
    if found is not None:
        return found
    return ops.compare(vm.out, symbol, builtin_value(a), builtin_value(b))


def unary_op(vm: Interpreter, fn: Callable[[Any], Any], a: Var) -> Var:
    """``fn(a)`` for a unary operator on any tracked value."""
    found = unary(vm, fn, a)
    return found if found is not None else ops.unary(vm.out, fn, builtin_value(a))


__all__ = ["binary", "binary_op", "compare", "compare_op", "unary", "unary_op"]
