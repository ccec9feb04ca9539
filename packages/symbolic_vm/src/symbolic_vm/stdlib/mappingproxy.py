"""``cls.__dict__`` of a class from the frame, as a view of the class's namespace; and
``types.MappingProxyType(d)`` of a tracked dict (``DictProxyVar``), a read-only view of it.

Python makes a fresh ``mappingproxy`` on every ``cls.__dict__`` read, so a guard on the
proxy's identity fails on every call. ``object_attrs`` reads it as a ``ClassNamespaceVar`` and
the operations here guard what they read through it instead: the class itself (its read
already guards its identity), each entry read (``ItemSource``), and, for ``in``, ``len`` and
iteration, the presence, count or order of the keys. A class attribute stored or deleted in
the trace would not show in the real proxy: such reads break instead.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, cast

from symbolic_vm import attributes, methods
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import ItemSource, Source
from symbolic_vm.type_trackers import VAR_TRACKERS, TypeTracker
from symbolic_vm.values import (
    ClassNamespaceVar,
    ConstVar,
    DictBox,
    DictProxyVar,
    DictVar,
    DictViewVar,
    IteratorVar,
    IterBox,
    MethodVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def _view(vm: Interpreter, obj: Var) -> tuple[ClassNamespaceVar, Source]:
    assert isinstance(obj, ClassNamespaceVar) and obj.source is not None
    owner = id(obj.owner)
    if any(stored_on == owner for stored_on, _ in vm.out.attr_overlay):
        raise Unsupported(f"reading {obj.source.describe()} after the trace changed the class")
    return obj, obj.source


def _key(vm: Interpreter, key: Var) -> str:
    k = ops.const_value(vm.out, key)
    if not isinstance(k, str):  # a class's namespace only ever holds str keys
        raise Unsupported(f"a class __dict__ indexed by a {type(k).__name__}")
    return k


def _where(source: Source) -> str:
    return source.describe()


def _entry(vm: Interpreter, obj: Var, key: Var) -> Var | None:
    """``cls.__dict__[key]``; None where the class has no such key (guarded either way)."""
    view, source = _view(vm, obj)
    k = _key(vm, key)
    if k not in view.value:
        vm.out.predicate(f"{k!r} not in d", f"{_where(source)} has no key {k!r}", d=source)
        return None
    # The entry's own guard (by its kind, where the trace relies on it) reads it again.
    vm.out.predicate(f"{k!r} in d", f"{_where(source)} has key {k!r}", d=source)
    return vm.out.wrap(view.value[k], ItemSource(source, k))


def _keys(vm: Interpreter, obj: Var) -> tuple[str, ...]:
    """The keys in order, guarded so (a key added, removed or reordered recompiles)."""
    view, source = _view(vm, obj)
    keys = tuple(view.value)
    if not all(type(k) is str for k in keys):
        raise Unsupported(f"iterating {_where(source)} with non-str keys")
    vm.out.predicate(f"tuple(d) == {keys!r}", f"{_where(source)} keys in order", d=source)
    return keys


def _copy(vm: Interpreter, obj: Var) -> DictVar:
    """A dict made in the trace with the namespace's items (each read at its own source)."""
    assert obj.source is not None
    source = obj.source
    value = cast(ClassNamespaceVar, obj).value
    return DictVar(
        DictBox({k: vm.out.wrap(value[k], ItemSource(source, k)) for k in _keys(vm, obj)})
    )


_VIEWS = ("keys", "values", "items")
_METHODS = frozenset({*_VIEWS, "get", "copy"})


def _attr(vm: Interpreter, obj: Var, name: str) -> Var | None:
    return MethodVar(obj, name) if name in _METHODS else None


def _method(
    vm: Interpreter, obj: Var, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    if kwargs:
        raise throw(TypeError, f"mappingproxy.{name}() takes no keyword arguments")
    if name in _VIEWS and not args:
        # mappingproxy's views are the namespace dict's own (dict_keys, ...): the same over a
        # copy made in the trace, so they rebuild as the real type.
        return DictViewVar(_copy(vm, obj), name)
    if name == "copy" and not args:
        return _copy(vm, obj)
    if name == "get" and len(args) in (1, 2):
        found = _entry(vm, obj, args[0])
        return found if found is not None else (args[1] if len(args) == 2 else ConstVar(None))
    raise Unsupported(f"mappingproxy.{name}() with {len(args)} arguments")


class _ClassNamespaceTracker(TypeTracker):
    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        found = _entry(vm, obj, key)
        if found is None:
            raise throw(KeyError, ops.const_value(vm.out, key))
        return found

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        raise throw(TypeError, "'mappingproxy' object does not support item assignment")

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        raise throw(TypeError, "'mappingproxy' object does not support item deletion")

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        view, source = _view(vm, obj)
        k = _key(vm, item)
        found = k in view.value
        test = f"{k!r} in d" if found else f"{k!r} not in d"
        vm.out.predicate(test, f"{_where(source)}: {test}", d=source)
        return ConstVar(found)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        view, source = _view(vm, obj)
        n = len(view.value)
        vm.out.predicate(f"len(d) == {n}", f"{_where(source)} has {n} keys", d=source)
        return ConstVar(n)

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        view, source = _view(vm, obj)
        full = bool(view.value)
        vm.out.predicate(f"bool(d) is {full}", f"{_where(source)} is empty: {not full}", d=source)
        return ConstVar(full)

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        return IteratorVar(IterBox([ConstVar(k) for k in _keys(vm, obj)]))


VAR_TRACKERS[ClassNamespaceVar] = _ClassNamespaceTracker()
attributes.MORE_ATTRS[ClassNamespaceVar] = _attr
methods.MORE_METHODS[ClassNamespaceVar] = _method


# -- types.MappingProxyType(d) of a tracked dict ----------------------------------------------


@implements(types.MappingProxyType)
def _mapping_proxy(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``MappingProxyType(d)``: a read-only view of a dict the VM tracks item by item."""
    if len(args) != 1 or kwargs:
        raise Unsupported("MappingProxyType() with these arguments")
    (mapping,) = args
    if isinstance(mapping, DictProxyVar):  # a proxy of a proxy reads the same dict
        return DictProxyVar(mapping.dict)
    if not isinstance(mapping, DictVar):
        raise Unsupported(f"MappingProxyType() of {ops.describe(mapping)}")
    return DictProxyVar(mapping)


def _proxy_attr(vm: Interpreter, obj: Var, name: str) -> Var | None:
    return MethodVar(obj, name) if name in _METHODS else None


def _proxy_method(
    vm: Interpreter, obj: Var, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """The proxy's methods are the dict's own, read-only ones (``copy`` is a plain dict)."""
    assert isinstance(obj, DictProxyVar)
    if kwargs:
        raise throw(TypeError, f"mappingproxy.{name}() takes no keyword arguments")
    return methods.call_method(vm, MethodVar(obj.dict, name), args, {})


class _DictProxyTracker(TypeTracker):
    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        assert isinstance(obj, DictProxyVar)
        return ops.getitem(vm.out, obj.dict, key)

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        raise throw(TypeError, "'mappingproxy' object does not support item assignment")

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        raise throw(TypeError, "'mappingproxy' object does not support item deletion")

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        assert isinstance(obj, DictProxyVar)
        vm.out.depend(obj.dict)
        return ConstVar(ops.const_value(vm.out, item) in obj.dict.box.items)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        assert isinstance(obj, DictProxyVar)
        vm.out.depend(obj.dict)
        return ConstVar(len(obj.dict.box.items))

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        assert isinstance(obj, DictProxyVar)
        vm.out.depend(obj.dict)
        return ConstVar(bool(obj.dict.box.items))

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        assert isinstance(obj, DictProxyVar)
        return ops.make_iterator(vm.out, obj.dict)


VAR_TRACKERS[DictProxyVar] = _DictProxyTracker()
attributes.MORE_ATTRS[DictProxyVar] = _proxy_attr
methods.MORE_METHODS[DictProxyVar] = _proxy_method
