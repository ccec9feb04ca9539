"""The C methods of builtin types called by name: ``p.__add__(q)``, ``set.__and__(p,
q)``, ``list.__eq__(p, r)``, ``frozenset.issubset(q, p)``, ``it.__iter__()``.

Called explicitly, a binary or comparison slot answers ``NotImplemented`` (or raises
TypeError) where the operator would go on to the other operand or raise: ``[1].__eq__((1,))``
is ``NotImplemented`` while ``[1] == (1,)`` is False. Which of the three it does depends only
on the operands' types (and an int's value for ``*``), so the real slot is first called on
*stand-ins*: an empty container of each operand's type, a constant's own value. Its TypeError
is the program's; its ``NotImplemented`` is the answer; otherwise the operator itself runs on
the tracked values (``vm.call`` of ``operator.add``, ...), so tensors inside the containers
stay graph values. A frozenset (an immutable set of constants) folds its methods on the real
object. An instance of a plain ``set`` subclass (``class S(set): pass``) made in the trace is
a SetVar with its class (``plain_set_subclass``). An exception's ``with_traceback(None)``
(unittest's assertRaises stores the exception so) is the exception itself: the VM's exceptions
carry no traceback.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported, folding_error, throw
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    DictViewVar,
    IteratorVar,
    ListVar,
    ObjectVar,
    SetBox,
    SetVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = [
    "call_descriptor", "call_dunder", "check_set_call", "container_type", "exception_method",
    "frozenset_method", "plain_set_subclass", "plain_subclass",
]

# slot name -> (the operator function, whether the slot's operand is the operator's left one)
_OPERATORS: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    "__add__": (operator.add, True), "__radd__": (operator.add, False),
    "__mul__": (operator.mul, True), "__rmul__": (operator.mul, False),
    "__sub__": (operator.sub, True), "__rsub__": (operator.sub, False),
    "__and__": (operator.and_, True), "__rand__": (operator.and_, False),
    "__or__": (operator.or_, True), "__ror__": (operator.or_, False),
    "__xor__": (operator.xor, True), "__rxor__": (operator.xor, False),
    "__iadd__": (operator.iadd, True), "__imul__": (operator.imul, True),
    "__isub__": (operator.isub, True), "__iand__": (operator.iand, True),
    "__ior__": (operator.ior, True), "__ixor__": (operator.ixor, True),
    "__eq__": (operator.eq, True), "__ne__": (operator.ne, True),
    "__lt__": (operator.lt, True), "__le__": (operator.le, True),
    "__gt__": (operator.gt, True), "__ge__": (operator.ge, True),
}
# slot name -> the builtin whose call on the container does the same
_PROTOCOL: dict[str, Callable[..., Any]] = {
    "__contains__": operator.contains, "__getitem__": operator.getitem,
    "__iter__": iter, "__len__": len,
}
_NO_STAND_IN = object()
_CONTAINERS = (list, tuple, set, frozenset, dict)


def container_type(var: Var) -> type | None:
    """The builtin container type of ``var`` (a frozenset is a real object of constants)."""
    if isinstance(var, ListVar):
        return list
    if isinstance(var, TupleVar):
        return tuple if var.named_type is None else None
    if isinstance(var, SetVar):
        return set
    if isinstance(var, DictVar):
        return dict
    if isinstance(var, ObjectVar) and type(var.value) is frozenset:
        return frozenset
    return None


def _stand_in(vm: Interpreter, var: Var) -> object:
    """A value of ``var``'s type that the slot can be probed with."""
    kind = container_type(var)
    if kind is not None:
        return kind()
    if isinstance(var, DictViewVar):
        return getattr({}, var.kind)()
    if isinstance(var, ConstVar):
        return ops.const_value(vm.out, var)  # guarded: the answer may depend on the value
    return _NO_STAND_IN


def call_dunder(
    vm: Interpreter, target: Var, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``target.name(*args)`` for an operator or protocol slot of a builtin container or an
    iterator; None when ``name`` is not one of those slots."""
    if isinstance(target, IteratorVar):
        return _iterator_dunder(target, name, args, kwargs)
    kind = container_type(target)
    if kind is None or not (name in _OPERATORS or name in _PROTOCOL):
        return None
    slot = getattr(kind, name, None)
    if slot is None:
        raise throw(AttributeError, f"'{kind.__name__}' object has no attribute '{name}'")
    stand_ins = [_stand_in(vm, a) for a in args]
    if any(s is _NO_STAND_IN for s in stand_ins) or any(
        _stand_in(vm, v) is _NO_STAND_IN for v in kwargs.values()
    ):
        raise Unsupported(f"{kind.__name__}.{name}() on {', '.join(map(ops.describe, args))}")
    try:
        probe = slot(kind(), *stand_ins, **{k: _stand_in(vm, v) for k, v in kwargs.items()})
    except TypeError as exc:  # the argument count or an operand's type: eager's own error
        raise throw(TypeError, *exc.args) from None
    except Exception:  # content-dependent (an index): the real call raises it
        probe = None
    if probe is NotImplemented:
        return ConstVar(NotImplemented)
    if name in _PROTOCOL:
        return vm.call(ObjectVar(_PROTOCOL[name]), [target, *args], {})
    fn, left = _OPERATORS[name]
    operands = [target, args[0]] if left else [args[0], target]
    return vm.call(ObjectVar(fn), operands, {})


def _iterator_dunder(
    target: IteratorVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    # Not __length_hint__: an IteratorVar may stand for a zip/map/enumerate object, which
    # has none (eager raises AttributeError).
    if name != "__iter__":
        return None
    if args or kwargs:
        raise throw(TypeError, f"expected 0 arguments, got {len(args) + len(kwargs)}")
    return target


def call_descriptor(
    vm: Interpreter, fn: object, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``set.__and__(p, q)``, ``list.__eq__(p, r)``, ``frozenset.copy(p)``: a method of a
    builtin container read from its class, called with the instance first; None when ``fn``
    is not one or the first argument is not a tracked container."""
    owner = getattr(fn, "__objclass__", None)
    name = getattr(fn, "__name__", None)
    if owner not in _CONTAINERS or not isinstance(name, str) or not isinstance(
        fn, (types.MethodDescriptorType, types.WrapperDescriptorType)
    ):
        return None
    if not args:
        try:
            fn()  # type: ignore[operator]
        except TypeError as exc:  # "descriptor '__and__' of 'set' object needs an argument"
            raise throw(TypeError, *exc.args) from None
    kind = container_type(args[0])
    if kind is None:
        return None
    if not issubclass(kind, owner):
        try:  # the descriptor checks its instance's type first: eager's message
            fn(kind())  # type: ignore[operator]
        except TypeError as exc:
            raise throw(TypeError, *exc.args) from None
        raise Unsupported(f"{owner.__name__}.{name} on a {kind.__name__}")
    from_class = vm.call(ObjectVar(getattr), [args[0], ConstVar(name)], {})
    return vm.call(from_class, args[1:], kwargs)


def frozenset_method(
    vm: Interpreter, target: ObjectVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """A method of a frozenset of constants, folded on the real object (its arguments are
    read as constants: copies, so nothing the program holds changes)."""
    out = vm.out
    value = ops.const_value(out, target)
    py_args = [ops.const_value(out, a) for a in args]
    py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    try:
        result = getattr(value, name)(*py_args, **py_kwargs)
    except Exception as exc:  # the program's own error, as eager raises it
        raise folding_error(exc, f"frozenset.{name}()") from None
    if result is value:
        return target  # frozenset.copy() is the object itself
    if isinstance(result, set):
        return SetVar(SetBox(result))
    if isinstance(result, frozenset):
        return ObjectVar(result)
    if isinstance(result, (bool, int)):
        return ConstVar(result)
    return out.wrap(result, None)


def exception_method(fn: object, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """``exc.with_traceback(None)`` on an exception the VM holds: the exception itself (it has
    no traceback to drop); None for any other call."""
    exc = getattr(fn, "__self__", None)
    if not isinstance(exc, BaseException) or getattr(fn, "__name__", None) != "with_traceback":
        return None
    if len(args) != 1 or kwargs or not (isinstance(args[0], ConstVar) and args[0].value is None):
        raise Unsupported("with_traceback() given a traceback")
    if exc.__traceback__ is not None:
        raise Unsupported("with_traceback(None) on an exception that holds a traceback")
    return ObjectVar(exc)


def check_set_call(vm: Interpreter, name: str, args: list[Var], kwargs: dict[str, Var]) -> None:
    """Eager's TypeError for a set method called with the wrong arguments (``p.copy(1)``,
    ``p.issubset()``, ``p.issubset(1)``, ``p.issubset([[]])``): set's methods have no signature
    to bind, so the method itself is called on an empty set with the arguments' values (where
    they are constants, else an empty value of their type). A TypeError there does not depend
    on the set's contents; any other outcome leaves the call to the set model."""
    probes: list[object] = []
    for arg in [*args, *kwargs.values()]:
        if ops.is_plain_value(arg):  # its value: no user __hash__/__eq__ can run on it
            probes.append(ops.const_value(vm.out, arg))
            continue
        stand_in = _stand_in(vm, arg)
        if stand_in is _NO_STAND_IN:
            return
        probes.append(stand_in)
    method = getattr(set(), name, None)
    if method is None:
        return
    try:
        method(*probes[: len(args)], **dict(zip(kwargs, probes[len(args):], strict=True)))
    except TypeError as exc:
        raise throw(TypeError, *exc.args) from None
    except Exception:  # KeyError of remove/pop: the contents decide
        return



# What a class statement puts in a class's namespace without changing its instances' behaviour
_PLAIN_NAMESPACE = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"})


def plain_set_subclass(cls: type) -> bool:
    """A subclass of ``set`` whose classes up to ``set`` define nothing of their own (``class
    S(set): pass``), made with set's ``__new__``/``__init__``: its instances are sets in every
    operation (set's results are plain sets, ``copy()`` too), only their type differs."""
    return plain_subclass(cls, set)


def plain_subclass(cls: object, base: type) -> bool:
    """``cls`` subclasses the builtin ``base`` and its classes up to it define nothing of
    their own (no metaclass, no class after ``base`` but object)."""
    if not (isinstance(cls, type) and issubclass(cls, base)) or cls is base:
        return False
    if type(cls) is not type or cls.__mro__[cls.__mro__.index(base) :] != (base, object):
        return False  # a metaclass or a base after set may change what the class does
    for klass in cls.__mro__[: cls.__mro__.index(base)]:
        if set(klass.__dict__) - _PLAIN_NAMESPACE or klass.__flags__ & _HEAPTYPE == 0:
            return False
    return True


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
