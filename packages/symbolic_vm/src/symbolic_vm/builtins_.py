"""Python builtins on tracked values: ``call_builtin`` answers a call of one -- through the
``@implements`` table (builtin_table; the families in builtin_objects and builtin_iterables), the
operator module as the VM's operations, torch's symbolic spellings on symbolic numbers, or by
folding a pure function on constants."""

from __future__ import annotations

import builtins
import inspect
import math
import operator
from typing import TYPE_CHECKING, Any

import torch

from symbolic_vm import (
    # The families register their @implements on import (builtin_objects below): imported
    # here, so that every builtin is in the table once this module is.
    builtin_iterables,  # noqa: F401
    object_model,
    object_operators,
)
from symbolic_vm import operations as ops
from symbolic_vm.builtin_objects import has_attribute, python_type
from symbolic_vm.builtin_table import (
    _IMPLS,
    _TYPE_IMPLS,
    BuiltinImpl,
    _key,
    implementation,
    implements,
)
from symbolic_vm.constant_values import MadeObjectId
from symbolic_vm.errors import Unsupported, folding_error, throw
from symbolic_vm.methods import tensor_to_scalar
from symbolic_vm.values import (
    ConstVar,
    ObjectVar,
    SetVar,
    SliceVar,
    SymVar,
    TensorVar,
    Var,
    builtin_value,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


# Names other modules imported from here before the split (the table's and the families').
__all__ = [
    "BuiltinImpl",
    "call_builtin",
    "has_attribute",
    "implementation",
    "implements",
    "python_type",
]


# Pure functions on constants: folded by calling them on the Python values.
_PURE: frozenset[int] = frozenset(
    id(f)
    for f in (
        builtins.int, builtins.float, builtins.bool, builtins.str, builtins.round, builtins.divmod,
        builtins.pow, builtins.repr, builtins.chr, builtins.ord, builtins.hash, builtins.format,
        builtins.frozenset, builtins.set, builtins.slice,
        *(getattr(math, n) for n in dir(math) if callable(getattr(math, n))),
        *(getattr(operator, n) for n in dir(operator) if not n.startswith("_")
          and callable(getattr(operator, n))),
    )
)

# Builtins whose result is not a number: on a symbolic int they specialise it (guarded by its
# value), as torch.compile does; traced on the SymInt they would give its symbol's name ("s0").
_SPECIALISING: frozenset[int] = frozenset(
    id(f) for f in (builtins.str, builtins.repr, builtins.format, builtins.hash, builtins.chr)
)

# Builtins and math functions whose call on a SymInt/SymFloat would specialise it (``float(s0)``
# asks the shape environment for the value), and torch's symbolic spelling of the same function,
# recorded in the graph instead so that the int stays symbolic (one compile for every value).
_SYMBOLIC_EQUIVALENTS: dict[int, Any] = {
    id(builtins.float): torch.sym_float,
    id(builtins.int): torch.sym_int,
    **{
        id(getattr(math, name)): getattr(torch, f"_sym_{name}")
        for name in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos",
                     "atan", "log2")
        if hasattr(torch, f"_sym_{name}")
    },
}

# Keyed by id (the operator functions live as long as the module): the callee looked up may be
# any object, unhashable (an OrderedDict) or with a user __eq__/__hash__ that must not run here.
_OPERATOR_BINARY = {id(v): k for k, v in ops.BINARY_OPS.items()}
_OPERATOR_COMPARE = {id(v): k for k, v in ops.COMPARE_OPS.items()}


# Builtins that take positional arguments only (CPython raises TypeError for any keyword).
_NO_KEYWORDS: tuple[Any, ...] = (
    builtins.isinstance, builtins.issubclass, builtins.len, builtins.callable, builtins.id,
    builtins.hasattr, builtins.getattr, builtins.setattr, builtins.delattr, builtins.abs,
    builtins.hash, builtins.iter, builtins.next, builtins.divmod, builtins.repr, builtins.ascii,
    builtins.chr, builtins.ord, builtins.hex, builtins.oct, builtins.bin, builtins.any,
    builtins.all, builtins.format,
)


# Builtins whose argument count and keywords are checked as CPython parses them, before an
# implementation below reads them (abs(x, 1), all(lst, 1) and sum(lst, start=1.0, extra=2)
# returned a value; getattr(o) and setattr(o, 'v') raised IndexError inside the VM): by their
# signature, or, for those without one, (fewest, most positional arguments, keywords taken).
_SIGNATURES: dict[int, inspect.Signature] = {
    id(f): inspect.signature(f)
    for f in (*_NO_KEYWORDS, builtins.sum, builtins.round, builtins.pow, builtins.sorted,
              builtins.tuple, builtins.list, builtins.reversed, builtins.enumerate)
    if f not in (builtins.getattr, builtins.iter, builtins.next)
}
_ARITY: dict[int, tuple[int, float, frozenset[str]]] = {
    id(builtins.getattr): (2, 3, frozenset()),
    id(builtins.iter): (1, 2, frozenset()),
    id(builtins.next): (1, 2, frozenset()),
    id(builtins.range): (1, 3, frozenset()),
    id(builtins.set): (0, 1, frozenset()),
    id(builtins.frozenset): (0, 1, frozenset()),
    id(builtins.bool): (0, 1, frozenset()),
    id(builtins.min): (1, math.inf, frozenset({"key", "default"})),
    id(builtins.max): (1, math.inf, frozenset({"key", "default"})),
}


def _argument_error(value: Any, args: list[Var], kwargs: dict[str, Var]) -> Exception | None:
    """Eager's TypeError for builtin ``value`` called with these many arguments and these
    keywords, raised in the traced code; None when CPython accepts them."""
    sig = _SIGNATURES.get(id(value))
    if sig is not None:
        try:
            sig.bind(*args, **kwargs)
            return None
        except TypeError:
            pass
    else:
        lo, hi, taken = _ARITY[id(value)]
        if lo <= len(args) <= hi and taken.issuperset(kwargs):
            return None
    try:  # the real builtin's own words: it checks the count before reading any argument
        value(*[()] * len(args), **dict.fromkeys(kwargs, ()))
    except TypeError as exc:
        return throw(TypeError, *exc.args)
    return throw(TypeError, f"{value.__name__}() got wrong arguments")


def call_builtin(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """The VM's answer to calling builtin ``fn``; None when it is not one of ours."""
    value = fn.value
    if kwargs and any(value is b for b in _NO_KEYWORDS):
        # eager's TypeError, raised in the traced code (an implementation below would
        # otherwise drop the keywords: isinstance(x, T, invalid=True) returned a value)
        raise throw(TypeError, f"{value.__name__}() takes no keyword arguments")
    if id(value) in _SIGNATURES or id(value) in _ARITY:
        error = _argument_error(value, args, kwargs)
        if error is not None:
            raise error
    impl = _IMPLS.get(_key(value))
    if impl is not None:
        return impl(vm, _with_user_iterators(vm, value, args), kwargs)
    per_type = _TYPE_IMPLS.get(type(value))
    found = per_type(vm, fn, args, kwargs) if per_type is not None else None
    if found is not None:
        return found
    if (value is int or value is float or value is bool) and len(args) == 1 and isinstance(
        args[0], TensorVar
    ):
        # int(t): an item() under capture_scalar_outputs
        scalar = None if kwargs else tensor_to_scalar(vm, value, args[0])
        if scalar is not None:
            return scalar
    # by identity: ``value`` may be unhashable (an OrderedDict's bound method's self, ...)
    text_kind = next((kind for f, kind in _TEXT.items() if f is value), None)
    if text_kind and 1 <= len(args) <= (2 if value is builtins.format else 1) and not kwargs:
        text = object_model.text_of(vm, args[0], text_kind, args[1] if len(args) > 1 else None)
        if text is not None:  # a user __str__/__repr__/__format__, traced
            return text
    if value is builtins.hash and len(args) == 1 and not kwargs:
        hashed = object_model.hash_of(vm, args[0])  # a user __hash__ (a dataclass's)
        if hashed is not None:
            return hashed
        obj = args[0]
        if isinstance(obj, ObjectVar) and obj.source is not None and (
            type(obj.value).__hash__ is object.__hash__  # type: ignore[comparison-overlap]
        ):
            # the identity's hash: this very object (its type guard alone would reuse the
            # number for another one)
            vm.out.request("ID_MATCH", obj.source, obj.value)
    if value is builtins.bool and len(args) == 1 and not kwargs:
        truth = object_model.truth(vm, args[0])  # a user __bool__/__len__, a deque's items
        if truth is not None:
            return ConstVar(truth)
    if id(value) in _OPERATOR_BINARY and not kwargs and len(args) == 2:
        return object_operators.binary_op(vm, _OPERATOR_BINARY[id(value)], args[0], args[1])
    if id(value) in _OPERATOR_COMPARE and not kwargs and len(args) == 2:
        return object_operators.compare_op(vm, _OPERATOR_COMPARE[id(value)], args[0], args[1])
    sym_equivalent = _SYMBOLIC_EQUIVALENTS.get(id(value))
    if sym_equivalent is not None and not kwargs and any(isinstance(a, SymVar) for a in args):
        return ops.graph_call(vm.out, sym_equivalent, args, kwargs)
    if value is builtins.slice and not kwargs and 1 <= len(args) <= 3 and any(
        ops.is_graph_value(a) for a in args
    ):
        # A slice holding a traced value stays one: made in the graph, its example would be a
        # slice of fake values, and that object leaked into the code as a constant.
        none = ConstVar(None)
        start, stop, step = (none, args[0], none) if len(args) == 1 else (*args, none)[:3]
        return SliceVar(start, stop, step)
    if id(value) in _PURE:
        specialise = id(value) in _SPECIALISING and not any(isinstance(a, TensorVar) for a in args)
        if not specialise and any(ops.is_graph_value(a) for a in args):
            _raise_type_error_on_symbols(value, args, kwargs)
            return ops.graph_call(vm.out, value, args, kwargs)
        py_args = [ops.const_value(vm.out, a) for a in args]
        py_kwargs = {k: ops.const_value(vm.out, v) for k, v in kwargs.items()}
        if value is not builtins.bool and any(
            isinstance(a, MadeObjectId) for a in (*py_args, *py_kwargs.values())
        ):
            raise Unsupported(f"{_name_of(value)}() of the id() of an object made in the "
                              "compiled function (its number is only known when the code runs)")
        try:
            return vm.out.wrap(value(*py_args, **py_kwargs), None)
        except Exception as exc:  # int("x"), math.sqrt(-1): eager raises the same
            raise folding_error(exc, "a builtin") from None
    return None


# Stand-ins of a symbolic number's Python type, to ask the builtin whether it takes the types.
_STAND_INS: dict[type, object] = {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}


def _raise_type_error_on_symbols(value: Any, args: list[Var], kwargs: dict[str, Var]) -> None:
    """Eager's TypeError for pure builtin ``value`` on symbolic numbers and constants of types it
    does not take, raised in the traced code: put in the graph, ``round(n, 'a')`` on a dynamic
    ``n`` raised when the graph ran, outside the program's ``try``. Only the types decide a
    TypeError, so a stand-in of each symbol's type asks the builtin (no tensors: their calls
    trace)."""
    stand_ins: list[object] = []
    for a in [*args, *kwargs.values()]:
        if isinstance(a, ConstVar):
            stand_ins.append(a.value)
        elif isinstance(a, SymVar) and type(a.example) in _STAND_INS:
            stand_ins.append(_STAND_INS[type(a.example)])
        else:  # tensors, containers: their calls trace as before
            return
    try:
        value(*stand_ins[: len(args)], **dict(zip(kwargs, stand_ins[len(args) :], strict=True)))
    except TypeError as exc:
        raise throw(TypeError, *exc.args) from None
    except Exception:  # a value-dependent error (ValueError, ...): the graph decides at run time
        return


def _name_of(fn: object) -> str:
    return str(getattr(fn, "__name__", fn))


_TEXT: dict[object, str] = {builtins.str: "str", builtins.repr: "repr", builtins.format: "format"}


# Builtins that iterate over their arguments: from which position on (min/max: only a lone
# iterable argument). A user object's own __iter__ is called first, as Python's iter() would.
_ITERATING: dict[int, int] = {
    **{id(f): 0 for f in (builtins.zip, builtins.enumerate, builtins.list, builtins.tuple,
                          builtins.sorted, builtins.sum, builtins.any, builtins.all,
                          builtins.set, builtins.frozenset, builtins.min, builtins.max)},
    id(builtins.map): 1,
    id(builtins.filter): 1,
}
_ONLY_FIRST = frozenset(id(f) for f in (
    builtins.enumerate, builtins.list, builtins.tuple, builtins.sorted, builtins.sum,
    builtins.any, builtins.all, builtins.set, builtins.frozenset, builtins.min, builtins.max,
))


# The builtins that size their result by the iterable's length hint after iter() (list_extend).
_SIZED = frozenset(id(f) for f in (builtins.list, builtins.tuple, builtins.sorted))


_SET_READERS = frozenset(id(f) for f in (builtins.set, builtins.frozenset))


def _is_set_instance(var: Var) -> bool:
    value = var.value if isinstance(var, ObjectVar) else builtin_value(var)
    return isinstance(value, (set, frozenset, SetVar)) or (
        isinstance(value, ObjectVar) and isinstance(value.value, frozenset)
    )


def _with_user_iterators(vm: Interpreter, fn: object, args: list[Var]) -> list[Var]:
    start = _ITERATING.get(id(fn))
    if start is None or (id(fn) in (id(builtins.min), id(builtins.max)) and len(args) != 1):
        return args
    stop = start + 1 if id(fn) in _ONLY_FIRST else len(args)
    converted = list(args)
    for i in range(start, min(stop, len(args))):
        if id(fn) in _SET_READERS and _is_set_instance(args[i]):
            # set()/frozenset() of a set subclass's instance copy its table, never calling a
            # Python __iter__ of the class (sets.set_operand reads it so)
            continue
        found = object_model.iterate(vm, args[i])
        if found is not None:
            if id(fn) in _SIZED:
                object_model.length_hint(vm, args[i])
            converted[i] = found
    return converted


@implements(builtins.abs)
def _abs(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return object_operators.unary_op(vm, operator.abs, args[0])


@implements(builtins.print, builtins.input, builtins.open, builtins.breakpoint)
def _side_effecting(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    raise Unsupported("call to a builtin with effects outside the program (print/open/...)")
