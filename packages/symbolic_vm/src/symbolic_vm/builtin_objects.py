"""Builtins about objects on tracked values: ``type``, ``isinstance``/``issubclass`` (with a
metaclass's own ``__instancecheck__`` traced), ``callable``, ``getattr``/``hasattr``/``setattr``,
``super``, ``functools.partial`` and ``dataclasses.fields``."""

from __future__ import annotations

import builtins
import dataclasses
import functools
import itertools
import types
from typing import TYPE_CHECKING, Any

import torch

from guards import TypeSource
from symbolic_vm import attr_stores, attributes, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.constant_values import MadeObjectId
from symbolic_vm.errors import TracedException, Unsupported
from symbolic_vm.tensor_attrs import tensor_has_attr
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DeletedAttrVar,
    DictVar,
    DictViewVar,
    FunctionVar,
    GeneratorVar,
    IteratorVar,
    ListVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectVar,
    PartialVar,
    SequentialSliceVar,
    SetVar,
    SuperVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def python_type(vm: Interpreter, var: Var) -> type:
    """The Python type of a tracked value (guarding what it was read from)."""
    return _python_type(vm, var)


def has_attribute(vm: Interpreter, obj: Var, name: str) -> bool:
    """``hasattr(obj, name)``; an attribute found missing on a frame object is guarded so."""
    if type_trackers.attribute_hooks(obj):
        # As hasattr does: the lookup, the class's __getattribute__/__getattr__ traced as calls
        # (run as often as eager runs them; guards never call them).
        try:
            attributes.getattr_var(vm, obj, name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return False
        return True
    found = _has_attr(vm, obj, name)
    if (
        isinstance(obj, ObjectVar)
        and obj.source is not None
        and (id(obj.value), name) not in vm.out.attr_overlay  # the trace set it: it is there
    ):
        # Either answer: an instance attribute comes and goes with no change of type.
        where = obj.source.describe()
        vm.out.predicate(
            f"hasattr(o, {name!r})" if found else f"not hasattr(o, {name!r})",
            f"{where} has {'an' if found else 'no'} attribute {name!r}",
            o=obj.source,
        )
    return found


def _python_type(vm: Interpreter, var: Var) -> type:
    """The Python type of a tracked value."""
    if isinstance(var, TensorVar):
        vm.out.depend(var)
        cls = vm.out.tensor_type(var)
        if cls is None:
            raise Unsupported("the class of a tensor computed from a tensor subclass input")
        return cls
    if isinstance(var, ConstVar):
        vm.out.depend(var)
        return int if isinstance(var.value, MadeObjectId) else type(var.value)
    if isinstance(var, TupleVar):
        return var.named_type or tuple
    if isinstance(var, ListVar):
        return list
    if isinstance(var, DictVar):
        return dict
    if isinstance(var, DictViewVar):
        return type(getattr({}, var.kind)())
    if isinstance(var, SequentialSliceVar):
        return torch.nn.Sequential
    if isinstance(var, SetVar):
        return var.cls
    if isinstance(var, ModuleVar):
        vm.out.depend(var)
        return type(var.module)
    if isinstance(var, ObjectVar):
        vm.out.depend(var)
        return type(var.value)
    if isinstance(var, NewObjectVar):
        return var.box.cls
    if isinstance(var, SymVar):  # the Python type the value has when the program runs
        example = var.example
        return bool if isinstance(example, torch.SymBool) else (
            float if isinstance(example, torch.SymFloat) else int
        )
    if isinstance(var, (FunctionVar, NestedFunctionVar)):
        return type(_python_type)
    if isinstance(var, PartialVar):
        return functools.partial
    if isinstance(var, BoundMethodVar):
        return types.MethodType
    raise Unsupported(f"type() of {ops.describe(var)}")


@implements(builtins.type)
def _type(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1:
        raise Unsupported("type() with three arguments (creating a class)")
    obj = args[0]
    cls = _python_type(vm, obj)
    # Where the class can be read again: its attributes read or stored through it are then
    # guarded and replayed there (``type(self).count += 1``).
    source = obj.box.cls_source if isinstance(obj, NewObjectVar) else (
        TypeSource(obj.source) if obj.source is not None and not isinstance(obj, TupleVar)
        else None
    )
    return ObjectVar(cls, source=source)


# The metaclass of torch's legacy tensor types (torch.FloatTensor, ...): their isinstance asks
# the tensor's dtype, device and layout, not its class.
_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)


@implements(builtins.isinstance)
def _isinstance(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, classes = args
    cls = ops.const_value(vm.out, classes)
    options = cls if isinstance(cls, tuple) else (cls,)
    if isinstance(obj, TensorVar) and any(type(c) is _LEGACY_TENSOR_TYPE for c in options):
        # TENSOR_MATCH (depended on by _python_type) guards dtype, device and layout.
        py_type = _python_type(vm, obj)
        return ConstVar(any(
            isinstance(obj.example, c) if type(c) is _LEGACY_TENSOR_TYPE else issubclass(py_type, c)
            for c in options
        ))
    if any(_user_instancecheck(c) is not None for c in options):
        return ConstVar(_isinstance_through_hooks(vm, obj, classes, options))
    if isinstance(obj, (IteratorVar, GeneratorVar)):
        return ConstVar(_iterator_isinstance(options))
    py_type = _python_type(vm, obj)
    if issubclass(py_type, cls):
        return ConstVar(True)
    if _overrides_class(py_type):
        # CPython then asks obj.__class__ (a proxy's property): read as eager reads it
        claimed = ops.const_value(vm.out, attributes.getattr_var(vm, obj, "__class__"))
        return ConstVar(
            claimed is not py_type and isinstance(claimed, type) and issubclass(claimed, cls)
        )
    return ConstVar(False)


# The classes a traced iterator or generator may really have: the VM does not record which one
# made it (iter() of a container, enumerate/zip/map/filter/reversed, an nn.Module iterator, a
# generator function, an itertools polyfill), so isinstance answers only where all agree.
_CONTAINERS: tuple[Any, ...] = ([], (), range(1), range(1 << 64), "", "\u1234", b"", set(), {})
_ITERATOR_TYPES: tuple[type, ...] = tuple({type(iter(c)) for c in _CONTAINERS} | {
    type(reversed([])), type(iter({}.values())), type(iter({}.items())), type(iter(int, 0)),
    types.GeneratorType, enumerate, zip, map, filter, reversed,
    *(v for v in vars(itertools).values() if isinstance(v, type) and hasattr(v, "__next__")),
})  # fmt: skip


def _iterator_isinstance(options: tuple[Any, ...]) -> bool:
    """``isinstance(it, options)`` for a traced iterator: ``(tuple, list)`` or ``Iterator`` have
    one answer whatever its exact class; ``enumerate`` or ``types.GeneratorType`` do not."""
    answers = {any(issubclass(t, c) for c in options) for t in _ITERATOR_TYPES}
    if len(answers) != 1:
        names = ", ".join(getattr(c, "__name__", repr(c)) for c in options)
        raise Unsupported(f"isinstance() of an iterator against {names}: its class is not tracked")
    return answers.pop()


def _overrides_class(cls: type) -> bool:
    """Whether instances of ``cls`` may answer ``__class__`` with another class (a property or
    attribute named ``__class__`` in a class dict): isinstance consults it."""
    return any("__class__" in k.__dict__ for k in cls.__mro__ if k is not object)


_CHECK = "__instancecheck__"


def _user_instancecheck(cls: object) -> types.FunctionType | None:
    """A user metaclass's own ``__instancecheck__`` (Python code isinstance calls), or None
    where isinstance is a subclass test of the object's type (``type``'s, ABCMeta's, torch's
    and typing's metaclasses, answered as before)."""
    if not isinstance(cls, type):
        return None
    meta: type = type(cls)
    hook = next(
        (k.__dict__[_CHECK] for k in meta.__mro__ if _CHECK in k.__dict__), None
    )
    if not isinstance(hook, types.FunctionType):
        return None
    module = hook.__module__ or ""
    if module.split(".")[0] in ("torch", "typing", "abc", "_py_abc", "typing_extensions"):
        return None
    return hook


def _isinstance_through_hooks(
    vm: Interpreter, obj: Var, classes: Var, options: tuple[Any, ...]
) -> bool:
    """``isinstance(obj, classes)`` as CPython runs it when a class's metaclass has its own
    ``__instancecheck__``: an exact type match first, then the hook (traced as a call), per
    class in order."""
    py_type = _python_type(vm, obj)
    for i, c in enumerate(options):
        if py_type is c:
            return True
        hook = _user_instancecheck(c)
        if hook is None:
            if issubclass(py_type, c):
                return True
            continue
        if isinstance(classes, TupleVar):
            c_var = classes.items[i]
        elif isinstance(classes, ObjectVar):
            c_var = classes
        else:
            c_var = ObjectVar(c)
        found = vm.call(BoundMethodVar(c_var, FunctionVar(hook)), [obj], {})
        if ops.truth(vm.out, found):
            return True
    return False


@implements(builtins.issubclass)
def _issubclass(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(issubclass(ops.const_value(vm.out, args[0]), ops.const_value(vm.out, args[1])))


@implements(builtins.callable)
def _callable(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    (obj,) = args
    if isinstance(obj, (FunctionVar, NestedFunctionVar, BoundMethodVar, PartialVar, ModuleVar)):
        return ConstVar(True)
    if isinstance(obj, (TensorVar, TupleVar, ListVar, DictVar, ConstVar)):
        return ConstVar(isinstance(obj, ConstVar) and callable(obj.value))
    # callable(obj) asks whether obj's *type* has a __call__ slot (the type itself is always
    # callable: asking callable() of it answered True for every object, a getset_descriptor too)
    kind = _python_type(vm, obj)
    return ConstVar(any("__call__" in vars(k) for k in kind.__mro__))


@implements(builtins.getattr)
def _getattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = ops.const_value(vm.out, args[1])
    if len(args) > 2:
        try:
            return attributes.getattr_var(vm, args[0], name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return args[2]
        except Unsupported:
            if _has_attr(vm, args[0], name):
                raise
            return args[2]
    return attributes.getattr_var(vm, args[0], name)


_A_PARTIAL = functools.partial(print)  # a partial instance: what hasattr finds on any


def _has_attr(vm: Interpreter, obj: Var, name: str) -> bool:
    if isinstance(obj, TensorVar):
        return tensor_has_attr(vm.out, obj, name)
    if isinstance(obj, PartialVar) and (obj.source is None or hasattr(_A_PARTIAL, name)):
        # What any partial has (func, args, keywords, __dict__, ...); one made here has
        # nothing in its __dict__ (a store on it is not modelled). A frame partial's own
        # __dict__ is not read: asking it for another name stays Unsupported.
        return hasattr(_A_PARTIAL, name)
    if isinstance(obj, (ListVar, DictVar, SetVar, TupleVar)):
        # Instances of list/dict/set/tuple (or a named tuple class) have no attributes of
        # their own: the class answers.
        return hasattr(python_type(vm, obj), name)
    if isinstance(obj, ModuleVar):
        vm.out.depend(obj)
        found = hasattr(obj.module, name)
        if vm.out.module_shared(obj.source):
            # Guarded by class only: another module of the class may lack (or have) it.
            assert obj.source is not None
            test = f"hasattr(m, {name!r})"
            vm.out.predicate(
                test if found else f"not {test}",
                f"{obj.source.describe()} {'has' if found else 'has no'} attribute {name!r}",
                m=obj.source,
            )
        return found
    if isinstance(obj, ObjectVar):
        vm.out.depend(obj)
        overlay = vm.out.attr_overlay.get((id(obj.value), name))
        if isinstance(overlay, DeletedAttrVar):  # deleted in the trace: the class may have it
            return hasattr(type(obj.value), name)
        if overlay is not None:
            return True
        return hasattr(obj.value, name)
    if isinstance(obj, NewObjectVar):
        slot = isinstance(attr_stores.class_lookup(obj.box.cls, name), types.MemberDescriptorType)
        return name in obj.box.attrs or (not slot and hasattr(obj.box.cls, name))
    if isinstance(obj, ConstVar):
        return hasattr(obj.value, name)
    if isinstance(obj, NestedFunctionVar):
        try:
            attributes.getattr_var(vm, obj, name)
        except TracedException as raised:
            if not isinstance(raised.exception, AttributeError):
                raise
            return False
        return True
    raise Unsupported(f"hasattr() on {ops.describe(obj)}")


@implements(builtins.hasattr)
def _hasattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(has_attribute(vm, args[0], ops.const_value(vm.out, args[1])))


@implements(builtins.setattr, object.__setattr__)
def _setattr(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    attr_stores.setattr_var(vm, args[0], ops.const_value(vm.out, args[1]), args[2])
    return ConstVar(None)


@implements(builtins.super)
def _super(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if args:
        return SuperVar(ops.const_value(vm.out, args[0]), args[1])
    code = vm.code
    if "__class__" not in code.co_freevars or not code.co_varnames:
        raise Unsupported("super() without arguments outside a method")
    cls_var = vm.cell("__class__").value
    if cls_var is None:
        raise Unsupported("super(): __class__ cell is empty")
    return SuperVar(ops.const_value(vm.out, cls_var), vm.load_local(code.co_varnames[0]))


@implements(functools.partial)
def _partial(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return PartialVar(args[0], tuple(args[1:]), dict(kwargs))


@implements(dataclasses.fields)
def _fields(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    cls = _python_type(vm, args[0]) if not isinstance(args[0], ObjectVar) else args[0].value
    return TupleVar(tuple(ObjectVar(f) for f in dataclasses.fields(cls)))

