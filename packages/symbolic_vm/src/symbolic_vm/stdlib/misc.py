"""Small builtins and class methods models use: number formatting (``hex``, ``oct``, ``bin``,
``float.fromhex``, ``int.from_bytes``, ``sys.intern``, ...) folded on constants,
``dict.fromkeys``, TorchScript's ``annotate`` and ``weakref.ref(obj)`` of a frame object.
"""

from __future__ import annotations

import builtins
import enum
import sys
import types
import weakref
from typing import TYPE_CHECKING

import torch

from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import BuiltinImpl, implements
from symbolic_vm.class_dicts import class_lookup
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.stdlib.polyfill import calls_of
from symbolic_vm.type_trackers import CLASS_TRACKERS, TypeTracker
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DeletedAttrVar,
    DictBox,
    DictVar,
    FunctionVar,
    IteratorVar,
    IterBox,
    ListBox,
    ListVar,
    ModuleVar,
    NewObjectVar,
    ObjectVar,
    TupleVar,
    Var,
    WeakRefVar,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

# Pure functions of constants whose result is a constant: called on the Python values (an
# exception they raise is raised in the traced code, as eager raises it).
_FOLDED = (
    builtins.hex, builtins.oct, builtins.bin, builtins.ascii, float.fromhex, float.hex,
    int.from_bytes, int.bit_length, int.bit_count, float.is_integer, float.as_integer_ratio,
    str.maketrans, bytes.fromhex, sys.intern,
)


def _folder(fn: object) -> BuiltinImpl:
    def run(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if any(ops.is_graph_value(a) for a in [*args, *kwargs.values()]):
            raise Unsupported(f"{getattr(fn, '__qualname__', fn)} of a traced tensor or symbol")
        py_args = [ops.const_value(vm.out, a) for a in args]
        py_kwargs = {k: ops.const_value(vm.out, v) for k, v in kwargs.items()}
        try:
            value = fn(*py_args, **py_kwargs)  # type: ignore[operator]
        except (TypeError, ValueError, OverflowError) as exc:
            raise throw(type(exc), *exc.args) from exc
        return vm.out.wrap(value, None)

    return run


for _fn in _FOLDED:
    implements(_fn)(_folder(_fn))


# Recognised by identity, never called: the function object is read from torch's namespace.
_TORCHSCRIPT = getattr(torch, "jit")  # noqa: B009 - named by object, never called


@implements(_TORCHSCRIPT.annotate)
def _annotate(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """TorchScript's ``annotate(T, value)``: a type hint; in Python, ``value``
    (the type, often ``typing.Any``, is never a graph value)."""
    bound = dict(zip(("the_type", "the_value"), args, strict=False)) | kwargs
    if set(bound) != {"the_type", "the_value"}:
        raise Unsupported("TorchScript annotate() with other arguments")
    return bound["the_value"]


@implements(dict.fromkeys)
def _fromkeys(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if kwargs or not 1 <= len(args) <= 2:
        raise Unsupported("dict.fromkeys with keyword arguments")
    value = args[1] if len(args) > 1 else ConstVar(None)
    items: dict[object, Var] = {}
    for key in ops.iterate(vm.out, args[0]):
        items[ops.const_value(vm.out, key)] = value  # one value object under every key
    return DictVar(DictBox(items))


@calls_of(enum.EnumMeta)
def _enum_lookup(vm: Interpreter, cls: ObjectVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``Color(value)``: the member with that value (a lookup in the pinned class; making a new
    enum class with the functional API is Unsupported)."""
    if len(args) != 1 or kwargs:
        raise Unsupported(f"calling the enum class {cls.value.__name__} to make a new enum")
    vm.out.depend(cls)
    value = ops.const_value(vm.out, args[0])
    try:
        member = cls.value(value)
    except ValueError as exc:
        raise throw(ValueError, *exc.args) from exc
    return vm.out.wrap(member, None)


class _EnumClassTracker(TypeTracker):
    """An enum class read like a container of its members: ``Color["RED"]``, ``for c in
    Color``, ``len(Color)``, ``x in Color``. The class is pinned by identity, and its members
    are fixed once it is made."""

    def _members(self, vm: Interpreter, obj: Var) -> list[Var]:
        assert isinstance(obj, ObjectVar)
        vm.out.depend(obj)
        return [vm.out.wrap(m, None) for m in obj.value]

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        assert isinstance(obj, ObjectVar)
        vm.out.depend(obj)
        name = ops.const_value(vm.out, key)
        try:
            return vm.out.wrap(obj.value[name], None)
        except KeyError as exc:
            raise throw(KeyError, *exc.args) from exc

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        return IteratorVar(IterBox(self._members(vm, obj)))

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        return ConstVar(len(self._members(vm, obj)))

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        assert isinstance(obj, ObjectVar)
        vm.out.depend(obj)
        return ConstVar(ops.const_value(vm.out, item) in obj.value)


CLASS_TRACKERS[enum.EnumMeta] = _EnumClassTracker()


@implements(types.MethodType)
def _method_type(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``types.MethodType(func, obj)`` (contextlib's ExitStack binds ``__exit__`` so)."""
    if len(args) != 2 or kwargs:
        raise throw(TypeError, "method expected 2 arguments")
    return BoundMethodVar(args[1], args[0])


@implements(builtins.dir)
def _dir(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``dir(obj)`` of a plain object from the frame (object's own ``__dir__``, no attribute
    hook): its names, sorted. The guard recomputes ``dir(o)`` (after checking the class still
    answers it with object's code, so the check never runs user code): an attribute added or
    removed on the instance or along its classes recompiles."""
    if len(args) != 1 or kwargs:
        raise Unsupported("dir() without exactly one argument")
    obj = args[0]
    if isinstance(obj, NewObjectVar):
        return _dir_of_new_object(vm, obj)
    if not isinstance(obj, ObjectVar) or obj.source is None or isinstance(obj.value, type):
        raise Unsupported(f"dir() of {ops.describe(obj)}")
    value = obj.value
    cls = type(value)
    _check_plain_dir(cls)
    changed = {id(value), *(id(k) for k in cls.__mro__)}
    if any(owner in changed for owner, _ in vm.out.attr_overlay):
        raise Unsupported("dir() after the trace changed the object or its class")
    names = dir(value)
    vm.out.depend(obj)
    vm.out.predicate(
        "type(o).__dir__ is object.__dir__"
        " and type(o).__getattribute__ is object.__getattribute__"
        f" and dir(o) == {names!r}",
        f"dir({obj.source.describe()}) gives the same names",
        o=obj.source,
    )
    return ListVar(ListBox([ConstVar(n) for n in names]))


def _check_plain_dir(cls: type) -> None:
    plain = (
        class_lookup(cls, "__dir__") is object.__dict__["__dir__"]
        and class_lookup(cls, "__getattribute__") is object.__dict__["__getattribute__"]
    )
    if not plain or cls.__module__ == "builtins" or type(cls) is not type:
        raise Unsupported(f"dir() of a {cls.__name__} (its own __dir__ or attribute hooks)")


def _dir_of_new_object(vm: Interpreter, obj: NewObjectVar) -> Var:
    """``dir(obj)`` of an object made in the trace: its attributes as the trace left them and
    the names along its class's bases (``object.__dir__``), the class's guarded when it came
    from the frame."""
    cls = obj.box.cls
    _check_plain_dir(cls)
    if any(owner in {id(k) for k in cls.__mro__} for owner, _ in vm.out.attr_overlay):
        raise Unsupported("dir() after the trace changed the object's class")
    from_class = dir(cls)
    if obj.box.cls_source is not None:
        vm.out.predicate(
            "type(c) is type and c.__dir__ is object.__dir__"
            " and c.__getattribute__ is object.__getattribute__"
            f" and dir(c) == {from_class!r}",
            f"dir({obj.box.cls_source.describe()}) gives the same names",
            c=obj.box.cls_source,
        )
    own = {k for k, v in obj.box.attrs.items() if not isinstance(v, DeletedAttrVar)}
    return ListVar(ListBox([ConstVar(n) for n in sorted(own | set(from_class))]))


@implements(sys.exc_info)
def _exc_info(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``sys.exc_info()`` outside any except block of the traced code: (None, None, None), as
    torch.compile answers it (contextlib.ExitStack's ``__exit__`` asks), guarded: the compiled
    function's caller may be handling an exception (an ``__exit__`` compiled as a frame of its
    own, called during an exception), and then eager's answer is that exception. Where it is
    one while tracing, or the traced code handles one (its traceback does not exist while
    tracing): a break, the call runs for real."""
    if args or kwargs:
        raise throw(TypeError, "sys.exc_info() takes no arguments")
    frame: Interpreter | None = vm
    while frame is not None:
        if frame.handling is not None:
            raise Unsupported("sys.exc_info() while the traced code handles an exception")
        frame = frame.parent
    if sys.exc_info()[0] is not None:  # the capture runs as the frame is called
        raise Unsupported("sys.exc_info() in a function called while an exception is handled")
    vm.out.predicate(
        "__import__('sys').exc_info()[0] is None",
        "no exception is being handled where the compiled function is called",
    )
    return TupleVar((ConstVar(None), ConstVar(None), ConstVar(None)))


# Classes of immutable constants: their unbound C methods (``str.upper``, ``int.__add__``) are
# pure functions of the constant they are called on.
_CONSTANT_TYPES = (str, bytes, int, float, complex, bool, tuple, frozenset)


@calls_of(types.MethodDescriptorType)
@calls_of(types.WrapperDescriptorType)
def _unbound_method(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``str.upper(s)``, ``map(int.__add__, ...)``: folded on constants (None: the VM's other
    rules, e.g. a descriptor of another class)."""
    owner = getattr(fn.value, "__objclass__", None)
    if owner not in _CONSTANT_TYPES or not args or not all(
        ops.is_constant(a) for a in [*args, *kwargs.values()]
    ):
        return None
    return _folder(fn.value)(vm, args, kwargs)


@implements(weakref.ref)
def _weak_reference(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``weakref.ref(obj)`` (no callback) of an object from the frame, pinned by identity: the
    real reference (CPython hands back an existing callback-free one, so eager's is the same
    object while ``obj`` lives), e.g. ``WeakKeyDictionary.__contains__``'s ``ref(key)``."""
    if len(args) != 1 or kwargs:
        raise Unsupported("weakref.ref() with a callback")
    (target,) = args
    if target.source is None or not isinstance(target, (ObjectVar, ModuleVar, FunctionVar)):
        # a value made in the trace, or a list/set/tensor the VM tracks as a copy or a fake
        raise Unsupported(f"weakref.ref() of {ops.describe(target)}")
    real = ops.const_value(vm.out, target)
    try:
        made = weakref.ref(real)
    except TypeError as exc:  # not weak-referenceable: eager's TypeError
        raise throw(TypeError, *exc.args) from None
    vm.out.request("ID_MATCH", target.source, real)  # the reference is to this object only
    return WeakRefVar(made, target=target)
