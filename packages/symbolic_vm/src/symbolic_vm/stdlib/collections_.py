"""``collections``: namedtuple methods (``_replace``, ``_asdict``, ``_make``, the class's own
methods) run as the Python the class defines; ``tuple.__new__(cls, iterable)`` (what ``_make``
calls) builds the named tuple; Counter's C helper ``_count_elements`` and ``heapq.nlargest``/
``nsmallest`` (``most_common(n)``) as polyfills, so a ``Counter`` made in the frame is traced
through its own Python methods.
"""

from __future__ import annotations

import collections
import heapq
import inspect
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from guards import TypeSource
from symbolic_vm import attributes, methods, object_attrs, object_model, slot_calls, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.attr_stores import class_lookup
from symbolic_vm.builtin_table import implementation, implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import AttrSource, DictCopySource, Source
from symbolic_vm.stdlib.polyfill import calls_of, polyfill, python_function
from symbolic_vm.values import (
    ConstVar,
    DictBox,
    DictVar,
    MethodVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


def _is_namedtuple_class(cls: object) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def _named_tuple_method(
    vm: Interpreter, target: TupleVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``nt._replace(b=2)``, ``nt._asdict()``, ``nt._make(...)``, a method of a NamedTuple
    class: the class's Python function, inlined with the tuple as ``self``."""
    cls = target.named_type
    if not _is_namedtuple_class(cls):
        return None
    assert cls is not None
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if target.source is not None:  # a class monkeypatched later must not reuse this code
        object_attrs.guard_class_attribute(vm.out, TypeSource(target.source), name, attr)
    cls_var = ObjectVar(cls)
    if isinstance(attr, types.FunctionType):
        return vm.call(python_function(attr), [target, *args], kwargs)
    if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
        return vm.call(python_function(attr.__func__), [cls_var, *args], kwargs)
    if isinstance(attr, staticmethod) and isinstance(attr.__func__, types.FunctionType):
        return vm.call(python_function(attr.__func__), args, kwargs)
    return None


methods.MORE_METHODS[TupleVar] = _named_tuple_method


@implements(tuple.__new__)
def _tuple_new(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``tuple.__new__(cls, iterable)``: a named tuple's ``_make``, or a plain tuple."""
    if kwargs or len(args) not in (1, 2):
        if args and isinstance(args[0], ObjectVar) and args[0].value is tuple:
            try:  # the argument check comes first: eager's TypeError, whatever the values
                tuple.__new__(tuple, *([()] * (len(args) - 1)), **dict.fromkeys(kwargs))
            except TypeError as exc:
                raise throw(TypeError, *exc.args) from None
        raise Unsupported("tuple.__new__ with keyword arguments")
    cls = ops.const_value(vm.out, args[0])
    items = tuple(ops.iterate(vm.out, args[1])) if len(args) > 1 else ()
    if cls is tuple:
        return TupleVar(items)
    if slot_calls.plain_subclass(cls, tuple):  # class T(tuple): pass
        return TupleVar(items, named_type=cls)
    if not _is_namedtuple_class(cls) and isinstance(cls, type) and issubclass(cls, tuple):
        # a tuple subclass with code of its own: a user object that is the tuple
        return object_model.new_builtin_instance(vm, args[0], TupleVar(items))
    if not _is_namedtuple_class(cls) or cls.__new__ is tuple.__new__:
        raise Unsupported(f"tuple.__new__ of {getattr(cls, '__name__', cls)!r}")
    if len(items) != len(cls._fields):
        raise Unsupported(f"{cls.__name__}._make with {len(items)} items")
    return TupleVar(items, fields=tuple(cls._fields), named_type=cls)


@polyfill(collections._count_elements)  # type: ignore[attr-defined]
def count_elements(mapping: Any, iterable: Iterable[Any]) -> None:
    # The C helper behind Counter.update: a get and a store per element, through the
    # mapping's own methods (a Counter subclass's __setitem__ runs, as in CPython's).
    get = mapping.get
    for element in iterable:
        mapping[element] = get(element, 0) + 1


@polyfill(heapq.nlargest)
def nlargest(
    n: int, iterable: Iterable[Any], key: Callable[[Any], Any] | None = None
) -> list[Any]:
    # heapq's documented equivalent; the order among equal keys is the same (both stable).
    return sorted(iterable, key=key, reverse=True)[:n]


@polyfill(heapq.nsmallest)
def nsmallest(
    n: int, iterable: Iterable[Any], key: Callable[[Any], Any] | None = None
) -> list[Any]:
    return sorted(iterable, key=key)[:n]


def _named_tuple_attr(vm: Interpreter, target: TupleVar, name: str) -> Var | None:
    """A named tuple's class data read through an instance (``nt._fields``,
    ``nt._field_defaults``); methods are left to MORE_METHODS."""
    cls = target.named_type
    if not _is_namedtuple_class(cls):
        return None
    attr = inspect.getattr_static(cls, name, None)
    if attr is None or callable(attr) or hasattr(type(attr), "__get__"):
        return None
    if target.source is not None:
        object_attrs.guard_class_attribute(vm.out, TypeSource(target.source), name, attr)
    return vm.out.wrap(attr, None)


attributes.MORE_ATTRS[TupleVar] = _named_tuple_attr


# -- OrderedDict, defaultdict, Counter ----------------------------------------------------------
#
# Made in the frame they are objects with items (object_model's dict subclasses: an ObjectBox
# whose ``items`` is a DictBox, rebuilt by codegen.make_object); their C methods are answered
# here on those items, and Counter's Python methods are traced. Read from the frame (exact
# classes only), their items are a snapshot ``dict(d)`` in guards and code; changing one from
# the frame is Unsupported (a clean break: the statement runs eagerly).

_FAMILY = (collections.OrderedDict, collections.defaultdict, collections.Counter)


@attrs.frozen
class _SnapshotSource(Source):
    """``builder(base)``: the items of a container from the frame, copied by the builtin
    ``builder`` (the subclasses name it), read without changing the container."""

    builder: ClassVar[type[Any]]
    base_source: Source

    @property
    def base(self) -> Source:
        return self.base_source

    def get(
        self, base_value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> object:
        return self.builder(base_value)

    def render(self, base_expr: str, bind: Callable[[object, str], str]) -> str:
        return f"{bind(self.builder, self.builder.__name__)}({base_expr})"

    def describe(self) -> str:
        return f"{self.builder.__name__}({self.base_source.describe()})"

    def name(self) -> str:  # as logs show it: the builder's name, not its bound repr
        return f"{self.builder.__name__}({self.base_source.name()})"


@attrs.frozen
class MappingSnapshotSource(_SnapshotSource):
    """``dict(base)``: an OrderedDict/defaultdict/Counter's items, in its own order, as a plain
    dict (no ``__missing__``, no default made while reading)."""

    builder = dict


@attrs.frozen
class ListSnapshotSource(_SnapshotSource):
    """``list(base)``: a deque's items, read without changing it."""

    builder = list


def _items(vm: Interpreter, obj: Var) -> DictVar | None:
    """The items of a family member: shared with a made object; for a Counter (a Python
    class) from the frame, object_model's ``dict.copy`` view; for an exact OrderedDict or
    defaultdict from the frame (C classes, whose order ``dict.copy`` does not keep) a
    ``dict(d)`` snapshot."""
    view = object_model._items_view(vm, obj)
    if view is not None:
        return view
    if isinstance(obj, ObjectVar) and type(obj.value) in _FAMILY and obj.source is not None:
        vm.out.depend(obj)
        snapshot = vm.out.wrap(dict(obj.value), MappingSnapshotSource(obj.source))
        return snapshot if isinstance(snapshot, DictVar) else None
    return None


def _from_frame(obj: Var) -> bool:
    return isinstance(obj, ObjectVar)


def _writable(vm: Interpreter, obj: Var) -> DictVar:
    """The items to change: a made object's own, or for an exact OrderedDict/defaultdict/
    Counter from the frame its snapshot's items, under the object's own source, recorded as
    changed: after the graph the code replays ``d.clear(); d.update(items)`` on the real
    object (the order, missing-key defaults and Counter counts come out as eager's)."""
    if isinstance(obj, ObjectVar):
        if type(obj.value) not in _FAMILY or obj.source is None:
            raise Unsupported(f"changing a {type(obj.value).__name__} from the frame")
        items = _items(vm, obj)
        assert items is not None
        vm.out.depend(items)
        # A snapshot's items written back under the object's own source (ContainerWrite:
        # d.clear(); d.update(...)); a dict.copy view is written back by object_model's rule.
        writable = items if isinstance(items.source, DictCopySource) else DictVar(
            items.box, source=obj.source
        )
        ops.note_mutation(vm.out, writable)
        return writable
    view = object_model.dict_view(obj)
    if view is None:
        raise Unsupported(f"changing the items of {ops.describe(obj)}")
    return view


def _missing(vm: Interpreter, obj: Var, key: Var) -> Var:
    """``d[key]`` for a key ``d`` lacks: the class's ``__missing__`` (defaultdict's factory,
    Counter's 0), as dict.__getitem__ calls it."""
    cls = type_trackers.user_class(obj)
    assert cls is not None
    hook = class_lookup(cls, "__missing__")
    if isinstance(hook, types.FunctionType):
        return vm.call(python_function(hook), [obj, key], {})
    if hook is collections.defaultdict.__dict__["__missing__"]:
        factory = attributes.getattr_var(vm, obj, "default_factory")
        if isinstance(factory, ConstVar) and factory.value is None:
            raise throw(KeyError, ops.const_value(vm.out, key))
        made = vm.call(factory, [], {})
        _writable(vm, obj).box.items[ops.const_value(vm.out, key)] = made
        return made
    raise throw(KeyError, ops.const_value(vm.out, key))


class _FamilyTracker(object_model.DictSubclassTracker):
    """OrderedDict, defaultdict and Counter (and subclasses): a user override first, then the
    items, with ``__missing__`` for absent keys."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        if type_trackers.python_method(vm, obj, "__getitem__") is not None:
            return super().getitem(vm, obj, key)
        items = _items(vm, obj)
        if items is None:  # objcore: a user subclass from the frame (object_model's view)
            return super().getitem(vm, obj, key)
        vm.out.depend(items)
        if ops.const_value(vm.out, key) in items.box.items:
            return ops.getitem(vm.out, items, key)
        return _missing(vm, obj, key)

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        if type_trackers.python_method(vm, obj, "__setitem__") is not None or (
            isinstance(obj, ObjectVar) and type(obj.value) not in _FAMILY
        ):  # objcore: a user subclass from the frame goes to object_model's view
            return super().setitem(vm, obj, key, value)
        if not isinstance(obj, (ObjectVar, NewObjectVar)):
            return False
        _writable(vm, obj).box.items[ops.const_value(vm.out, key)] = value
        return True

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        if isinstance(obj, ObjectVar) and type(obj.value) not in _FAMILY:
            return super().delitem(vm, obj, key)
        if super().delitem(vm, obj, key):
            return True
        k = ops.const_value(vm.out, key)
        items = _writable(vm, obj)
        if k not in items.box.items:
            raise throw(KeyError, k)
        del items.box.items[k]
        return True

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        items = _items(vm, obj) if _from_frame(obj) else None
        if items is None:
            return super().contains(vm, obj, item)
        vm.out.depend(items)
        return ConstVar(ops.const_value(vm.out, item) in items.box.items)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        items = _items(vm, obj) if _from_frame(obj) else None
        if items is None:
            return super().length(vm, obj)
        vm.out.depend(items)
        return ConstVar(len(items.box.items))

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        items = _items(vm, obj) if _from_frame(obj) else None
        return super().iterate(vm, obj) if items is None else ops.make_iterator(vm.out, items)

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        items = _items(vm, obj) if _from_frame(obj) else None
        if items is None:
            return super().truth(vm, obj)
        vm.out.depend(items)
        return ConstVar(bool(items.box.items))


type_trackers.register(*_FAMILY)(_FamilyTracker)


@implements(collections.defaultdict)
def _defaultdict(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``defaultdict(factory, *args, **kwargs)`` made in the frame (its factory an attribute
    of the object, its items a dict)."""
    factory = args[0] if args else ConstVar(None)
    if not (isinstance(factory, ConstVar) and factory.value is None) and not _callable(factory):
        raise throw(TypeError, "first argument must be callable or None")
    obj = NewObjectVar(ObjectBox(collections.defaultdict, {"default_factory": factory},
                                 items=DictBox({})))
    if len(args) > 1 or kwargs:
        object_model.call_slot(vm, dict.__init__, [obj, *args[1:]], kwargs)
    return obj


def _fromkeys_of(cls: type, state: Callable[[], dict[str, Var]]) -> None:
    @implements(cls.fromkeys)  # type: ignore[attr-defined]
    def fromkeys(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
        """``OrderedDict.fromkeys(keys, value=None)`` (or defaultdict's, with no factory): one
        made in the frame, one value object under every key (as dict.fromkeys)."""
        # OrderedDict's also takes ``value=`` by keyword; dict's (defaultdict's) no keywords
        keywords = {"value"} if cls is collections.OrderedDict else set()
        if set(kwargs) - keywords or not 1 <= len(args) + len(kwargs) <= 2:
            raise Unsupported(f"{cls.__name__}.fromkeys with other arguments")
        value = args[1] if len(args) > 1 else kwargs.get("value", ConstVar(None))
        found = object_model.iterate(vm, args[0])
        keys = ops.iterate(vm.out, args[0] if found is None else found)
        items = {ops.const_value(vm.out, key): value for key in keys}
        return NewObjectVar(ObjectBox(cls, state(), items=DictBox(items)))


_fromkeys_of(collections.OrderedDict, dict)
_fromkeys_of(collections.defaultdict, lambda: {"default_factory": ConstVar(None)})


def _callable(var: Var) -> bool:
    if isinstance(var, (ObjectVar, ConstVar)):
        return callable(var.value)
    return True  # functions, methods, partials, modules the VM tracks


@implements(collections.OrderedDict.move_to_end)
def _move_to_end(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, key, *rest = args
    last = ops.truth(vm.out, rest[0] if rest else kwargs.get("last", ConstVar(True)))
    items = _mutable_items(vm, obj, "move_to_end")
    k = ops.const_value(vm.out, key)
    if k not in items.box.items:
        raise throw(KeyError, k)
    value = items.box.items.pop(k)
    if last:
        items.box.items[k] = value
    else:
        rest_items = dict(items.box.items)
        items.box.items.clear()
        items.box.items[k] = value
        items.box.items.update(rest_items)
    return ConstVar(None)


@implements(collections.OrderedDict.popitem)
def _popitem(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, *rest = args
    last = ops.truth(vm.out, rest[0] if rest else kwargs.get("last", ConstVar(True)))
    items = _mutable_items(vm, obj, "popitem")
    if not items.box.items:
        raise throw(KeyError, "dictionary is empty")
    k = next(reversed(items.box.items)) if last else next(iter(items.box.items))
    return TupleVar((ConstVar(k), items.box.items.pop(k)))


def _mutable_items(vm: Interpreter, obj: Var, name: str) -> DictVar:
    if not isinstance(obj, (ObjectVar, NewObjectVar)):
        raise Unsupported(f"OrderedDict.{name} on {ops.describe(obj)}")
    return _writable(vm, obj)


_READING = frozenset({"get", "keys", "values", "items", "copy", "__contains__", "__len__"})
_CHANGING = frozenset({"update", "pop", "setdefault", "clear", "__setitem__"})


@calls_of(types.BuiltinMethodType)
def _bound_c_method(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """``d.get(k)``, ``d.items()``, ``d.update(...)``, ``od.move_to_end(k)`` on an exact
    OrderedDict/defaultdict/Counter from the frame (the bound C method read from it): its
    snapshot read, or changed and replayed; ``q.count(v)``/``q.index(v)`` on a deque from the
    frame (its other methods change it: Unsupported). None: not one of those."""
    owner = getattr(fn.value, "__self__", None)
    name = fn.value.__name__
    frozen = ops.frozen_mapping(ObjectVar(owner))
    if frozen is not None and name in _READING:  # inspect.signature(f).parameters.items()
        return methods.call_method(vm, MethodVar(vm.out.wrap(frozen, None), name), args, kwargs)
    if type(owner) not in (*_FAMILY, collections.deque) or not isinstance(fn.source, AttrSource):
        return None
    obj = vm.out.wrap(owner, fn.source.base)
    if not isinstance(obj, ObjectVar):
        return None
    unbound = getattr(type(owner), name, None)
    modelled = implementation(unbound)
    if modelled is not None:  # move_to_end, popitem; a deque's methods (stdlib/deque_.py)
        return modelled(vm, [obj, *args], kwargs)
    if name in _READING:
        items = _items(vm, obj)
        assert items is not None
        return methods.call_method(vm, MethodVar(items, name), args, kwargs)
    if name in _CHANGING and not (name == "update" and type(owner) is collections.Counter):
        return methods.call_method(vm, MethodVar(_writable(vm, obj), name), args, kwargs)
    return None


@implements(dict.__delitem__)
def _dict_delitem(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``dict.__delitem__(d, k)`` (Counter's ``super().__delitem__``): on a family member's
    items (replayed for one from the frame), else object_model's dict-subclass slots."""
    obj = args[0]
    cls = type_trackers.user_class(obj)
    ours = cls is not None and isinstance(type_trackers.tracker_for(cls), _FamilyTracker) and (
        not isinstance(obj, ObjectVar) or type(obj.value) in _FAMILY
    )  # a user subclass from the frame: object_model's own dict-subclass view
    if len(args) == 2 and not kwargs and ours:
        k = ops.const_value(vm.out, args[1])
        items = _writable(vm, obj)
        if k not in items.box.items:
            raise throw(KeyError, k)
        del items.box.items[k]
        return ConstVar(None)
    found = object_model.call_slot(vm, dict.__delitem__, args, kwargs)
    if found is None:
        raise Unsupported(f"dict.__delitem__ on {ops.describe(obj)}")
    return found


@implements(collections.namedtuple)
def _make_namedtuple(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``collections.namedtuple(name, fields, ...)`` called in the frame on constants: the
    class is made once, while tracing, and its instances are tuples the VM tracks (rebuilt
    through it when returned), as torch.compile does; eager makes a new class per call, of
    the same name, fields and defaults. Its source (``exec`` of a generated ``__new__``) is
    never traced."""
    py_args = [ops.const_value(vm.out, a) for a in args]
    py_kwargs = {k: ops.const_value(vm.out, v) for k, v in kwargs.items()}
    # namedtuple names the module from its caller's frame, which here is not the program's
    py_kwargs.setdefault("module", vm.f_globals.get("__name__", "__main__"))
    try:
        made = collections.namedtuple(*py_args, **py_kwargs)  # type: ignore[misc]
    except (TypeError, ValueError) as exc:
        raise throw(type(exc), *exc.args) from exc
    return ObjectVar(made)
