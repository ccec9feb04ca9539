"""The TypeTracker registry and the user-class lookups the object semantics share.

``tracker_for(cls)`` walks ``cls.__mro__`` and returns the ``TypeTracker`` registered for the
nearest class (``register(cls)``). The trackers themselves register from where their semantics
live (user classes and dict subclasses: object_model; the stdlib models: stdlib). Attribute
reads and stores (a class's ``__getattribute__``/``__getattr__``/``__setattr__``) and the object
operators reach user code through these and ``vm.call``; they sit below object_model so that
attributes, attr_stores and object_operators import them without a cycle (issue 24).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from guards import TypeSource
from symbolic_vm.class_dicts import MISSING, class_lookup
from symbolic_vm.errors import TracedException
from symbolic_vm.guard_api import AttrSource, InstanceAttrSource
from symbolic_vm.values import ConstVar, NewObjectVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


class TypeTracker:
    """How the VM runs the operations of one Python type; each method answers None when the
    value is not one it handles (the caller's own rules then apply)."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        return None

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        return False

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        return False

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        return None

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        return None

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        return None

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        return None

    def setattr(self, vm: Interpreter, obj: Var, name: str, value: Var) -> bool:
        return False

    def call(
        self, vm: Interpreter, obj: Var, args: list[Var], kwargs: dict[str, Var]
    ) -> Var | None:
        """``obj(*args, **kwargs)`` for an object made in the trace whose class's ``__call__``
        is C code (a user class's Python ``__call__`` is inlined without asking)."""
        return None


_TRACKERS: dict[type, TypeTracker] = {}
_RESOLVED: dict[type, TypeTracker | None] = {}


def register(*classes: type) -> Callable[[type[TypeTracker]], type[TypeTracker]]:
    """Class decorator: one instance of the tracker answers for ``classes`` and subclasses."""

    def add(tracker: type[TypeTracker]) -> type[TypeTracker]:
        instance = tracker()
        for cls in classes:
            _TRACKERS[cls] = instance
        _RESOLVED.clear()
        return tracker

    return add


def tracker_for(cls: type) -> TypeTracker | None:
    """The tracker registered for the nearest class in ``cls.__mro__`` (cached per class)."""
    try:
        return _RESOLVED[cls]
    except KeyError:
        pass
    found = next((_TRACKERS[k] for k in cls.__mro__ if k in _TRACKERS), None)
    _RESOLVED[cls] = found
    return found


def user_class(var: Var) -> type | None:
    """The class of a user-defined object the registry dispatches on: an object made while
    tracing, or a plain instance from the frame (never a class, module, function or builtin)."""
    if isinstance(var, NewObjectVar):
        return var.box.cls
    if isinstance(var, ObjectVar):
        value = var.value
        if isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                              types.MethodType, types.WrapperDescriptorType,
                              types.MethodDescriptorType, types.MethodWrapperType)):
            return None
        cls = type(value)
        if cls.__module__ == "builtins":
            return None
        return cls
    return None


def tracker_of(var: Var) -> TypeTracker | None:
    """The tracker answering for ``var``: its kind's, its user class's, or for a class its
    metaclass's."""
    by_kind = VAR_TRACKERS.get(type(var))
    if by_kind is not None:
        return by_kind
    cls = user_class(var)
    if cls is None and isinstance(var, ObjectVar) and isinstance(var.value, type):
        return CLASS_TRACKERS.get(type(var.value))  # a class's own operations (``Color["RED"]``)
    return None if cls is None else tracker_for(cls)


# Trackers for classes themselves, by their exact metaclass (enum.EnumMeta: stdlib/misc.py).
CLASS_TRACKERS: dict[type, TypeTracker] = {}

# Trackers for kinds of tracked value, by the var's exact class (a class's ``__dict__``:
# stdlib/mappingproxy.py).
VAR_TRACKERS: dict[type, TypeTracker] = {}


def store_attribute(vm: Interpreter, obj: Var, name: str, value: Var) -> bool:
    """``obj.name = value`` through the class's own ``__setattr__`` (True when done here)."""
    tracker = tracker_of(obj)
    return tracker is not None and tracker.setattr(vm, obj, name, value)


def python_method(vm: Interpreter, obj: Var, name: str) -> Any:
    """The Python function ``type(obj).name`` resolves to, guarded where the class has a
    source; None when the class has no such attribute or it is not a Python function."""
    cls = user_class(obj)
    if cls is None:
        return None
    found = class_lookup(cls, name)
    if found is MISSING or not isinstance(found, types.FunctionType):
        return None
    guard_class_attr(vm, obj, name, found)
    return found


def guard_class_attr(vm: Interpreter, obj: Var, name: str, found: object) -> None:
    """Guard that ``type(obj).name`` is still ``found`` (where the class has a source)."""
    if isinstance(obj, NewObjectVar):
        if obj.box.cls_source is not None:
            vm.out.request("ID_MATCH", AttrSource(obj.box.cls_source, name), found)
    elif obj.source is not None:
        vm.out.depend(obj)
        vm.out.request("ID_MATCH", AttrSource(TypeSource(obj.source), name), found)


def attribute_hooks(obj: Var) -> bool:
    """Whether ``obj``'s class reads attributes through its own Python ``__getattribute__`` or
    ``__getattr__`` (user code the VM traces; a guard must not run it)."""
    cls = user_class(obj)
    return cls is not None and any(
        isinstance(class_lookup(cls, hook), types.FunctionType)
        for hook in ("__getattribute__", "__getattr__")
    )


def getattr_hook(vm: Interpreter, obj: Var, name: str) -> Var | None:
    """``obj.name`` through the class's Python ``__getattribute__`` (traced as a call), or its
    ``__getattr__`` for a name the normal lookup does not find; None: the normal lookup."""
    cls = user_class(obj)
    if cls is None or name == "__class__":
        return None
    hook = class_lookup(cls, "__getattribute__")
    fallback = class_lookup(cls, "__getattr__")
    if not isinstance(fallback, types.FunctionType):
        fallback = None
    if isinstance(hook, types.FunctionType):
        guard_class_attr(vm, obj, "__getattribute__", hook)
        try:
            return vm.call(vm.out.wrap(hook, None), [obj, ConstVar(name)], {})
        except TracedException as raised:
            # As CPython's slot: an AttributeError from __getattribute__ asks __getattr__.
            if fallback is None or not isinstance(raised.exception, AttributeError):
                raise
    elif fallback is None or not _missing(obj, cls, name):
        return None
    else:
        _guard_missing(vm, obj, name)
    guard_class_attr(vm, obj, "__getattr__", fallback)
    return vm.call(vm.out.wrap(fallback, None), [obj, ConstVar(name)], {})


def _guard_missing(vm: Interpreter, obj: Var, name: str) -> None:
    """The normal lookup of ``name`` failed on a frame object (so ``__getattr__`` answers):
    guard that its instance dict still lacks it, read without running the class's hooks (the
    class attributes are fixed by the class guards)."""
    if not isinstance(obj, ObjectVar) or obj.source is None:
        return
    try:
        object.__getattribute__(obj.value, "__dict__")
    except AttributeError:
        return  # no instance dict: nothing can shadow the class
    vm.out.predicate(
        f"{name!r} not in d",
        f"{obj.source.describe()}.{name} is still unset",
        d=InstanceAttrSource(obj.source, "__dict__"),
    )


def _missing(obj: Var, cls: type, name: str) -> bool:
    """Whether the normal lookup of ``name`` fails (found without running user code)."""
    if class_lookup(cls, name) is not MISSING:
        return False
    if isinstance(obj, NewObjectVar):
        return name not in obj.box.attrs
    assert isinstance(obj, ObjectVar)
    try:
        instance_dict = object.__getattribute__(obj.value, "__dict__")
    except AttributeError:
        return True
    return name not in instance_dict
