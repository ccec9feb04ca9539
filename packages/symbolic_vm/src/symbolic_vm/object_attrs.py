"""Attribute reads on Python objects as ``object.__getattribute__`` does them: real objects
from the frame (instance dict, then the class: methods bound, properties called, descriptors),
objects made while tracing (their box, then the class), and ``super()`` lookups; with the
class-attribute guards that make monkeypatching a class recompile.

``attributes.getattr_var`` dispatches here; ``object_model`` calls ``object_attr(raw=True)``
for ``object.__getattribute__`` itself (sources that bypass a class's own hook).
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from typing import TYPE_CHECKING, Any, cast

import torch

from symbolic_vm import operations as ops
from symbolic_vm.class_dicts import MISSING, class_lookup, is_data_descriptor
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import (
    AttrSource,
    ClassDictSource,
    InstanceAttrSource,
    ItemSource,
    Source,
    TypeSource,
)
from symbolic_vm.values import (
    BoundMethodVar,
    ClassNamespaceVar,
    ConstVar,
    DeletedAttrVar,
    DictBox,
    DictVar,
    FunctionVar,
    ModuleVar,
    NewObjectVar,
    ObjectVar,
    SuperVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output


_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_GETATTRIBUTE = type.__dict__["__getattribute__"]  # the guards read cls.__dict__ again


def _plain_attr(obj: Var, name: str) -> Any:
    return AttrSource(obj.source, name) if obj.source is not None else None


def _raw_attr(obj: Var, name: str) -> Any:
    return InstanceAttrSource(obj.source, name) if obj.source is not None else None


def object_attr(vm: Interpreter, obj: ObjectVar, name: str, *, raw: bool = False) -> Var:
    """``obj.name`` on a real object, as ``object.__getattribute__`` finds it (``raw``: the
    sources read it so too, bypassing a class's own ``__getattribute__``)."""
    found = _object_attr(vm, obj, name, raw=raw)
    if name == "__dict__" and isinstance(found, DictVar):
        # The instance dict as the trace left it: attributes stored before it was read show
        # in it (attr_stores keeps the two views one after that).
        owner = id(obj.value)
        for (stored_on, attr_name), value in vm.out.attr_overlay.items():
            if stored_on == owner and isinstance(value, DeletedAttrVar):
                found.box.items.pop(attr_name, None)
            elif stored_on == owner:
                found.box.items[attr_name] = value
    return found


def _object_attr(vm: Interpreter, obj: ObjectVar, name: str, *, raw: bool) -> Var:
    out = vm.out
    value = obj.value
    _attr = _raw_attr if raw else _plain_attr
    overlay = out.attr_overlay.get((id(value), name))
    if isinstance(overlay, DeletedAttrVar):
        return _read_after_delete(vm, obj, name)
    if overlay is not None:
        return overlay
    out.depend(obj)
    if isinstance(value, type):
        found = class_descriptor(value, name)
        if found is not None:
            stored = ClassDictSource(obj.source, name) if obj.source is not None else None
            return descriptor_get(vm, found, stored, ConstVar(None), obj)
    if isinstance(value, (types.ModuleType, type)):
        try:
            attr = inspect.getattr_static(value, name)
        except AttributeError:
            attr = _MISSING  # a module-level __getattr__ (torch._VF) may still answer
        if attr is _MISSING or isinstance(attr, (staticmethod, classmethod, property)) or hasattr(
            attr, "__get__"
        ):
            try:
                attr = getattr(value, name)
            except AttributeError as exc:
                raise Unsupported(f"{value!r} has no attribute {name!r}") from exc
        if (
            name == "__dict__" and type(attr) is types.MappingProxyType and obj.source is not None
            and isinstance(value, type) and class_lookup(type(value), name) is _TYPE_DICT
            and class_lookup(type(value), "__getattribute__") is _TYPE_GETATTRIBUTE
        ):
            # A fresh proxy on every read: a view of the class's namespace, guarded by what is
            # read through it, never by the proxy's identity (stdlib/mappingproxy.py).
            return ClassNamespaceVar(attr, value, source=_attr(obj, name))
        return out.wrap(attr, _attr(obj, name))
    # A plain instance: instance dict first, then the class (methods bind to the instance).
    instance_dict = getattr(value, "__dict__", {})
    cls_attr = _class_lookup(type(value), name)
    written = out.tracked(instance_dict)  # obj.__dict__ read (and maybe written) in the trace
    if (
        isinstance(written, DictVar) and written.box.mutated and name in written.box.items
        and not is_data_descriptor(cls_attr)
    ):
        return written.box.items[name]
    if isinstance(cls_attr, property) and cls_attr.fget is not None:
        if obj.source is not None:
            guard_class_attribute(out, TypeSource(obj.source), name, cls_attr)
        return vm.call(out.wrap(cls_attr.fget, None), [obj], {})
    if python_get(cls_attr) and (is_data_descriptor(cls_attr) or name not in instance_dict):
        # A user descriptor: its __get__ is traced as a call (run as often as eager runs it).
        if obj.source is not None:
            guard_method_resolution(out, obj.source, value, name, cls_attr)
        stored = ClassDictSource(TypeSource(obj.source), name) if obj.source is not None else None
        owner = out.wrap(type(value), TypeSource(obj.source) if obj.source is not None else None)
        return descriptor_get(vm, cls_attr, stored, obj, owner)
    if name in instance_dict:
        if cls_attr is _MISSING or obj.source is None:
            return out.wrap(instance_dict[name], _attr(obj, name))
        # Shadowing a class attribute: read the instance dict itself, so that the guard
        # fails (never runs a descriptor) once the instance stops shadowing it.
        own = ItemSource(InstanceAttrSource(obj.source, "__dict__"), name)
        return out.wrap(instance_dict[name], own)
    if obj.source is not None and cls_attr is not _MISSING:
        guard_method_resolution(out, obj.source, value, name, cls_attr)
    if isinstance(cls_attr, types.FunctionType):
        return BoundMethodVar(obj, FunctionVar(cls_attr))
    if (
        _is_c_method(cls_attr) and isinstance(value, dict) and obj.source is not None
        and type(value).__flags__ & _HEAPTYPE
    ):
        # A dict/OrderedDict method of a user dict subclass: object_model.call_slot runs it
        # on the instance's items (as read and changed by the trace).
        out.request("ID_MATCH", ClassDictSource(TypeSource(obj.source), name), cls_attr)
        return BoundMethodVar(obj, ObjectVar(cls_attr))
    if isinstance(cls_attr, staticmethod):
        return out.wrap(cls_attr.__func__, None)
    if isinstance(cls_attr, classmethod):
        return BoundMethodVar(out.wrap(type(value), None), out.wrap(cls_attr.__func__, None))
    try:
        attr = object.__getattribute__(value, name) if raw else getattr(value, name)
    except AttributeError as exc:
        if obj.source is not None:
            # Without running the class's own __getattribute__/__getattr__ (the trace ran them).
            where = obj.source.describe()
            if raw:
                instance_dict = InstanceAttrSource(obj.source, "__dict__")
                out.predicate(f"{name!r} not in d", f"{where} has no attribute {name!r}",
                              d=instance_dict)
            else:
                out.predicate(f"not hasattr(o, {name!r})", f"{where} has no attribute {name!r}",
                              o=obj.source)
        raise throw(AttributeError, *exc.args) from None
    return out.wrap(attr, _attr(obj, name))


def _read_after_delete(vm: Interpreter, obj: ObjectVar, name: str) -> Var:
    """``obj.name`` after the trace deleted it from the instance: the class's attribute, or
    AttributeError as eager raises."""
    cls = type(obj.value)
    cls_attr = _class_lookup(cls, name)
    if cls_attr is _MISSING and not hasattr(cls, "__getattr__"):
        raise throw(AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")
    if isinstance(cls_attr, types.FunctionType) and obj.source is not None:
        guard_method_resolution(vm.out, obj.source, obj.value, name, cls_attr)
        return BoundMethodVar(obj, FunctionVar(cls_attr))
    raise Unsupported(f"reading {name!r} of an object after deleting it from the instance")


_MISSING = object()
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def python_get(attr: object) -> bool:
    """Whether ``attr``, found on a class, is a descriptor whose ``__get__`` is Python code."""
    if attr is _MISSING or isinstance(attr, (property, functools.cached_property)):
        return False
    return isinstance(class_lookup(type(attr), "__get__"), types.FunctionType)


def class_descriptor(cls: type, name: str) -> object | None:
    """The user descriptor ``cls.name`` resolves to (its ``__get__(None, cls)`` runs), or None
    when the lookup is anything else (a plain value, a method, a metaclass attribute)."""
    meta = type(cls)
    if meta.__getattribute__ is not type.__getattribute__:  # type: ignore[comparison-overlap]
        return None
    if class_lookup(meta, name) is not MISSING:
        return None
    found = _class_lookup(cls, name)
    return found if python_get(found) else None


def descriptor_get(
    vm: Interpreter, desc: object, where: Source | None, instance: Var, owner: Var
) -> Var:
    """``type(desc).__get__(desc, instance, owner)`` traced as a call; the guards pin the
    descriptor (read from the class dicts, so no ``__get__`` runs in them) and its ``__get__``."""
    out = vm.out
    getter = class_lookup(type(desc), "__get__")
    if where is not None:
        out.request("ID_MATCH", where, desc)
        out.request("ID_MATCH", AttrSource(TypeSource(where), "__get__"), getter)
    return vm.call(out.wrap(getter, None), [out.wrap(desc, where), instance, owner], {})


def guard_class_attribute(out: Output, cls_source: Source, name: str, found: object) -> None:
    """Guard what ``cls.name`` resolved to (the function, property, static/class method), so
    that monkeypatching the class after compiling recompiles instead of running the old code.

    ``cls_source`` names the class (``type(L['obj'])`` or the class's own source).
    """
    attr: Source = AttrSource(cls_source, name)
    if any(name in k.__dict__ and is_data_descriptor(k.__dict__[name]) for k in (type, object)):
        # ``cls.__class__`` (``__doc__``, ...) reads type's own descriptor, not the class
        # dict's entry: guard the class dicts themselves
        attr = ClassDictSource(cls_source, name)
    if isinstance(found, (types.FunctionType, property)):
        out.request("ID_MATCH", attr, found)
    elif isinstance(found, staticmethod):
        out.request("ID_MATCH", attr, found.__func__)
    elif isinstance(found, classmethod):
        # Reading it through the class binds a fresh method object: guard the function.
        out.request("ID_MATCH", AttrSource(attr, "__func__"), found.__func__)


def guard_method_resolution(
    out: Output, source: Source, value: object, name: str, found: object
) -> None:
    """``value.name`` (at ``source``) resolved to class attribute ``found``: guard that the
    class still holds it and, for a non-data descriptor, that the instance does not shadow it."""
    guard_class_attribute(out, TypeSource(source), name, found)
    if hasattr(value, "__dict__") and not hasattr(type(found), "__set__"):
        out.predicate(
            f"{name!r} not in o.__dict__",
            f"{source.describe()}.{name} is not set on the instance",
            o=source,
        )


def _class_lookup(cls: type, name: str) -> Any:
    found = class_lookup(cls, name)
    return _MISSING if found is MISSING else found


def _slot_owner(cls: type) -> str:
    """The class as CPython names it reading an unset slot: 3.13's member descriptor gives
    the fully qualified name (``'%T'``: module and qualname, except builtins and __main__)."""
    if sys.version_info < (3, 13) or cls.__module__ in ("builtins", "__main__"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def new_object_attr(vm: Interpreter, obj: NewObjectVar, name: str) -> Var:
    cls_attr = _class_lookup(obj.box.cls, name)
    if name in obj.box.attrs and not (python_get(cls_attr) and is_data_descriptor(cls_attr)):
        return obj.box.attrs[name]
    if isinstance(cls_attr, types.MemberDescriptorType):  # an unset __slots__ member
        owner = _slot_owner(obj.box.cls)
        raise throw(AttributeError, f"{owner!r} object has no attribute {name!r}")
    if name == "__class__" and cls_attr is object.__dict__["__class__"]:
        # object's getset descriptor (not a class's own __class__ property): the class it was
        # made with
        return ObjectVar(obj.box.cls, source=obj.box.cls_source)
    if name == "__dict__":  # object's __dict__ getset: the instance's attributes, shared
        return DictVar(DictBox(obj.box.attrs))
    if _is_c_method(cls_attr):
        return BoundMethodVar(obj, ObjectVar(cls_attr))  # a dict method of a dict subclass
    if cls_attr is _MISSING:
        raise throw(AttributeError, f"{obj.box.cls.__name__!r} object has no attribute {name!r}")
    if obj.box.cls_source is not None:
        guard_class_attribute(vm.out, obj.box.cls_source, name, cls_attr)
    if isinstance(cls_attr, property) and cls_attr.fget is not None:
        return vm.call(vm.out.wrap(cls_attr.fget, None), [obj], {})
    if isinstance(cls_attr, types.FunctionType):
        return BoundMethodVar(obj, FunctionVar(cls_attr))
    if isinstance(cls_attr, staticmethod):
        return vm.out.wrap(cls_attr.__func__, None)
    if isinstance(cls_attr, classmethod):
        return BoundMethodVar(vm.out.wrap(obj.box.cls, None), vm.out.wrap(cls_attr.__func__, None))
    if isinstance(cls_attr, functools.cached_property):
        return _cached_property_of_new_object(vm, obj, name, cls_attr)
    if python_get(cls_attr):
        cls_source = obj.box.cls_source
        where = ClassDictSource(cls_source, name) if cls_source is not None else None
        return descriptor_get(vm, cls_attr, where, obj, vm.out.wrap(obj.box.cls, cls_source))
    if hasattr(type(cls_attr), "__get__"):
        # Any other descriptor (a property without a getter, a user __get__): its value is
        # not the class attribute itself, and the VM cannot call __get__ on an object that
        # only exists symbolically.
        raise Unsupported(
            f"reading {name!r} of a {obj.box.cls.__name__}: a {type(cls_attr).__name__} descriptor"
        )
    return vm.out.wrap(cls_attr, None)


def super_attr(vm: Interpreter, sup: SuperVar, name: str) -> Var:
    obj = sup.obj
    if isinstance(obj, NewObjectVar):
        cls = obj.box.cls
    else:
        real = _real_object(obj)
        # super() in a classmethod: its second argument is the class itself (CPython then
        # walks that class's MRO, not its metaclass's)
        is_class = isinstance(real, type) and isinstance(sup.cls, type) and issubclass(
            real, sup.cls
        )
        cls = real if is_class else type(real)
    mro = cls.__mro__
    if sup.cls not in mro:
        raise Unsupported(f"super({sup.cls.__name__}, ...) of an object outside its class")
    start = mro.index(sup.cls) + 1
    for klass in mro[start:]:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if attr is torch.nn.Module.__init__ and not isinstance(obj, NewObjectVar):
                # A module from outside the trace (a subclass's __init__ frame, captured
                # when the frame that called it broke there): its tables must really be made.
                raise Unsupported("nn.Module.__init__ of a module made outside the trace")
            if attr is object.__init__ or attr is torch.nn.Module.__init__:
                return FunctionVar(_NOOP)
            if isinstance(attr, types.FunctionType):
                return BoundMethodVar(obj, FunctionVar(attr))
            if name == "__new__" and attr in _BUILTIN_NEWS:
                return ObjectVar(attr)  # a static method: super().__new__(cls) passes cls
            if isinstance(attr, types.WrapperDescriptorType) and name == "__init__":
                if klass is type:  # a metaclass's super().__init__(name, bases, ns)
                    return FunctionVar(_NOOP)
                if issubclass(klass, BaseException):
                    # BaseException.__init__ sets ``args`` (``super().__init__(msg)`` keeps
                    # only msg of the constructor's arguments): a write to a real object,
                    # which runs eagerly (was a no-op: args kept every argument)
                    raise Unsupported(f"super().__init__ of exception class {klass.__name__}")
                # dict.__init__ (a dict subclass's items): object_model.call_slot runs it
            if _is_c_method(attr):  # object/dict slots: object_model.call_slot runs them
                return BoundMethodVar(obj, ObjectVar(attr))
            if isinstance(attr, (classmethod, staticmethod)) and isinstance(
                attr.__func__, types.FunctionType
            ):
                return _super_wrapped(vm, obj, cls, attr)
            raise Unsupported(f"super().{name} resolves to {type(attr).__name__}")
    raise Unsupported(f"super() has no attribute {name!r}")


# The builtins' __new__ a class's own __new__ reaches through super() (calls.call and the
# builtin table model each).
_BUILTIN_NEWS = (object.__new__, dict.__new__, tuple.__new__, set.__new__, frozenset.__new__)


def _super_wrapped(
    vm: Interpreter, obj: Var, cls: type, attr: classmethod[Any, Any, Any] | staticmethod[Any, Any]
) -> Var:
    """``super().name`` found a classmethod (bound to the class the lookup started from:
    ``obj`` itself in a classmethod, else ``obj``'s class) or a staticmethod (its function)."""
    func = FunctionVar(cast(types.FunctionType, attr.__func__))
    if isinstance(attr, staticmethod):
        return func
    if isinstance(obj, ObjectVar) and obj.value is cls:
        return BoundMethodVar(obj, func)
    if isinstance(obj, NewObjectVar):
        return BoundMethodVar(vm.out.wrap(cls, obj.box.cls_source), func)
    return BoundMethodVar(
        vm.out.wrap(cls, TypeSource(obj.source) if obj.source is not None else None), func
    )


def _is_c_method(attr: object) -> bool:
    return isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType))


def _noop(*args: object, **kwargs: object) -> None:
    """object.__init__ reached through super(): nothing to do."""


_NOOP = cast(types.FunctionType, _noop)


def _real_object(var: Var) -> Any:
    if isinstance(var, ModuleVar):
        return var.module
    if isinstance(var, ObjectVar):
        return var.value
    raise Unsupported(f"super() on {ops.describe(var)}")


def _cached_property_of_new_object(
    vm: Interpreter, obj: NewObjectVar, name: str, attr: functools.cached_property[Any]
) -> Var:
    """``obj.name`` where the class has ``functools.cached_property`` ``name``: call its
    function once and keep the value in the instance dict, as ``cached_property.__get__``."""
    result = vm.call(vm.out.wrap(attr.func, None), [obj], {})
    obj.box.attrs[attr.attrname or name] = result
    return result
