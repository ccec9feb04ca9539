"""Operations on values dispatched by their Python type, and user-defined objects.

``type_trackers.tracker_for(cls)`` walks ``cls.__mro__`` and returns the ``TypeTracker``
registered for the nearest class (``register(cls)``), so an operation on a value is answered by
the tracker of its type, as CPython answers it from the type's slots. A tracker method returns
None (or False) for "not mine": the caller then keeps its own answer (the VM's built-in values:
tensors, lists, dicts, constants), so kinds move onto the registry one at a time.

Registered here:

- ``object``: user-defined classes, dispatched like CPython: ``obj[k]``, ``obj[k] = v``,
  ``del obj[k]``, ``k in obj``, ``len(obj)``, ``iter(obj)``, ``bool(obj)`` and stores through
  a class's own ``__setattr__`` call the Python method the class defines (inlined, so user
  hooks run exactly as often as in eager); a method that is a C slot of a builtin base is the
  base's behaviour (``OrderedDict.__setitem__`` on a ``ModelOutput``).
- ``dict``: instances of dict/OrderedDict subclasses made while tracing keep their items in
  ``ObjectBox.items`` (a ``DictBox``), apart from their attributes; the dict's own methods
  (``keys``, ``items``, ``get``, ``__setitem__`` reached through ``super()``, ...) act on it.
- ``tuple``/``set``/``frozenset``: instances of user subclasses with code of their own made
  while tracing are user objects whose ``ObjectBox.base`` is the tuple/set they are
  (``new_builtin_instance``); what the class leaves to its C base acts on that value.

Calls of C slots and method descriptors of ``object``/``dict`` on such values
(``super().__setattr__``, ``super().__getattribute__``, ``dict.get(self, k)``) are answered by
``call_slot``.
"""

from __future__ import annotations

import collections
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from symbolic_vm import (
    attributes,
    eager_errors,
    object_attrs,
    optimizer_state,
    sets,
    slot_calls,
    tensor_key_stores,
)
from symbolic_vm import operations as ops
from symbolic_vm.class_dicts import MISSING, class_lookup
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.guard_api import DictCopySource
from symbolic_vm.methods import call_method
from symbolic_vm.object_operators import compare_op
from symbolic_vm.type_trackers import (
    TypeTracker,
    python_method,
    register,
    tracker_of,
    user_class,
)
from symbolic_vm.values import (
    ClassNamespaceVar,
    ConstVar,
    DictBox,
    DictProxyVar,
    DictVar,
    FunctionVar,
    MethodVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    SetVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter


# -- entry points for the opcode handlers and builtins ------------------------------------------


def getitem(vm: Interpreter, obj: Var, key: Var) -> Var:
    """``obj[key]``."""
    found = tensor_key_stores.stored_item(vm, obj, key)
    if found is None:
        found = optimizer_state.tensor_keyed_item(vm, obj, key)
    if found is not None:
        return found
    tracker = tracker_of(obj)
    found = tracker.getitem(vm, obj, key) if tracker is not None else None
    if found is not None:
        return found
    try:
        return ops.getitem(vm.out, obj, key)
    except eager_errors.ARGUMENT_ERRORS as err:  # ``{}[[n]]``: eager's TypeError instead
        eager = eager_errors.eager_getitem_error(vm.out, obj, key, err)
        if eager is None:
            raise
        raise eager from None


def setitem(vm: Interpreter, obj: Var, key: Var, value: Var) -> None:
    """``obj[key] = value``."""
    if tensor_key_stores.store(vm, obj, key, value):
        return
    tracker = tracker_of(obj)
    if tracker is None or not tracker.setitem(vm, obj, key, value):
        ops.setitem(vm.out, obj, key, value)


def delitem(vm: Interpreter, obj: Var, key: Var) -> bool:
    """``del obj[key]`` when the registry handles ``obj``'s type (else False)."""
    tracker = tracker_of(obj)
    return tracker is not None and tracker.delitem(vm, obj, key)


def contains(vm: Interpreter, obj: Var, item: Var) -> Var | None:
    """``item in obj`` when the registry handles ``obj``'s type."""
    found = tensor_key_stores.stored_contains(vm, obj, item)
    if found is not None:
        return found
    tracker = tracker_of(obj)
    return tracker.contains(vm, obj, item) if tracker is not None else None


def length(vm: Interpreter, obj: Var) -> Var | None:
    """``len(obj)`` when the registry handles ``obj``'s type."""
    tracker = tracker_of(obj)
    return tracker.length(vm, obj) if tracker is not None else None


def iterate(vm: Interpreter, obj: Var) -> Var | None:
    """What a ``for`` loop (or ``list(obj)``, ``sum(obj)``, ...) iterates for ``obj`` when the
    registry handles its type: what ``__iter__`` returned; an iterator object of a user class
    as a generator that calls its ``__next__`` lazily, one call per item, as the loop does."""
    return as_iterable(vm, iter_object(vm, obj))


def iter_object(vm: Interpreter, obj: Var) -> Var | None:
    """``iter(obj)`` itself when the registry handles ``obj``'s type (its ``__iter__``'s result;
    for a class with only ``__getitem__``, the sequence protocol's iterator)."""
    tracker = tracker_of(obj)
    found = tracker.iterate(vm, obj) if tracker is not None else None
    if found is None and isinstance(tracker, UserObjectTracker):
        getitem = python_method(vm, obj, "__getitem__")
        if getitem is not None and python_method(vm, obj, "__iter__") is None:
            return _inline(vm, _sequence_iterator, [obj, vm.out.wrap(getitem, None)])
    return found


def as_iterable(vm: Interpreter, iterator: Var | None) -> Var | None:
    """``iterator`` itself, or for an iterator object of a user class a generator over its
    ``__next__`` (the values come one call at a time, interleaved with the consumer's code)."""
    if iterator is None:
        return None
    step = python_method(vm, iterator, "__next__")
    if step is None:
        return iterator
    return _inline(vm, _next_calls, [iterator, vm.out.wrap(step, None)])


def next_of(vm: Interpreter, iterator: Var) -> Var:
    """``next(iterator)`` for an iterator object of a user class: its ``__next__`` traced (a
    StopIteration it raises propagates). Unsupported when the class has no Python ``__next__``."""
    found = _call_dunder(vm, iterator, "__next__", [])
    if found is None:
        raise Unsupported(f"next() on {ops.describe(iterator)}")
    return found


def _inline(vm: Interpreter, fn: Callable[..., Any], args: list[Var]) -> Var:
    assert isinstance(fn, types.FunctionType)
    return vm.call(FunctionVar(fn), args, {})


def _next_calls(iterator: Any, step: Callable[[Any], Any]) -> Any:
    """The VM inlines this generator for a user iterator: one ``__next__`` call per item."""
    while True:
        try:
            value = step(iterator)
        except StopIteration:
            return
        yield value


def _sequence_iterator(obj: Any, getitem: Callable[[Any, int], Any]) -> Any:
    """``iter(obj)`` for a class with ``__getitem__`` and no ``__iter__``: items 0, 1, ...
    until IndexError (or StopIteration), as CPython's sequence iterator asks for them."""
    index = 0
    while True:
        try:
            value = getitem(obj, index)
        except (IndexError, StopIteration):
            return
        yield value
        index += 1


def hash_of(vm: Interpreter, obj: Var) -> Var | None:
    """``hash(obj)`` for a user object: the class's Python ``__hash__`` traced (its int
    reduced as CPython's slot reduces it); ``__hash__ = None``: TypeError. None: not a user
    class's own hash (object's is the identity: the caller's rules apply)."""
    cls = user_class(obj)
    if cls is None:
        return None
    found = class_lookup(cls, "__hash__")
    if found is None:
        raise throw(TypeError, f"unhashable type: '{cls.__name__}'")
    result = _call_dunder(vm, obj, "__hash__", [])
    if result is None:
        return None
    value = ops.const_value(vm.out, result)
    if not isinstance(value, int):
        raise throw(TypeError, "__hash__ method should return an integer")
    return ConstVar(hash(value))


def text_of(vm: Interpreter, obj: Var, kind: str, spec: Var | None = None) -> Var | None:
    """``str(obj)``, ``repr(obj)`` or ``format(obj, spec)`` (``kind``: "str", "repr",
    "format") for a user object whose class answers it in Python: its ``__str__``/``__repr__``/
    ``__format__`` traced, object's defaults followed as CPython follows them (``__str__`` is
    ``__repr__``, ``__format__`` with an empty spec is ``str``). None: not a user object, or
    object's own ``__repr__`` (an address) would answer."""
    cls = user_class(obj)
    if cls is None:
        return None
    if kind == "format":
        if python_method(vm, obj, "__format__") is not None:
            result = _call_dunder(vm, obj, "__format__", [spec or ConstVar("")])
            return _checked_text(vm, result, "__format__")
        if class_lookup(cls, "__format__") is not object.__format__:
            return None
        if spec is not None and ops.const_value(vm.out, spec):
            raise throw(TypeError, f"unsupported format string passed to {cls.__name__}.__format__")
        kind = "str"
    if kind == "str" and python_method(vm, obj, "__str__") is not None:
        return _checked_text(vm, _call_dunder(vm, obj, "__str__", []), "__str__")
    if kind == "str" and class_lookup(cls, "__str__") is not object.__str__:
        return None
    if python_method(vm, obj, "__repr__") is not None:
        return _checked_text(vm, _call_dunder(vm, obj, "__repr__", []), "__repr__")
    return None


def _checked_text(vm: Interpreter, result: Var | None, name: str) -> Var:
    assert result is not None
    value = ops.const_value(vm.out, result)
    if not isinstance(value, str):
        raise throw(TypeError, f"{name} returned non-string (type {type(value).__name__})")
    return ConstVar(value)


def length_hint(vm: Interpreter, obj: Var) -> None:
    """The size guess ``list(obj)``/``tuple(obj)`` asks a user iterable for after ``iter()``
    (``__len__``, else ``__length_hint__``): its answer only sizes the result, but the call
    runs as in eager."""
    for name in ("__len__", "__length_hint__"):
        if python_method(vm, obj, name) is not None:
            _call_dunder(vm, obj, name, [])
            return


def mapping_items(vm: Interpreter, obj: Var) -> dict[Any, Var] | None:
    """The items ``dict(obj)`` / ``d.update(obj)`` copy from a user mapping, read the way
    CPython's dict merge reads them: a dict subclass that keeps dict's own ``__iter__`` is read
    directly (no user code runs); any other object with ``keys`` through ``obj.keys()`` and
    ``obj[key]`` for each key (an OrderedDict subclass: ModelOutput's ``__getitem__`` runs
    once per key, as in eager). None: not a user object with ``keys`` (pairs are iterated).

    ``cls.__dict__`` (a mappingproxy) is read through its tracker (stdlib/mappingproxy.py): its
    keys in order and each entry, guarded as such, so ``dict(Cls.__dict__)`` compiles once and
    recompiles only when the class's namespace changes."""
    if isinstance(obj, DictProxyVar):  # MappingProxyType(d): d's own items
        vm.out.depend(obj.dict)
        return dict(obj.dict.box.items)
    if isinstance(obj, ClassNamespaceVar):
        keys = iterate(vm, obj)
        assert keys is not None
        return {
            ops.const_value(vm.out, key): getitem(vm, obj, key)
            for key in ops.iterate(vm.out, keys)
        }
    cls = user_class(obj)
    if cls is None or class_lookup(cls, "keys") is MISSING:
        return None
    if class_lookup(cls, "__iter__") is dict.__iter__:
        view = _items_view(vm, obj)
        if view is not None:
            vm.out.depend(view)
            return dict(view.box.items)
    keys = vm.call(attributes.getattr_var(vm, obj, "keys"), [], {})
    found = iterate(vm, keys)
    return {
        ops.const_value(vm.out, key): getitem(vm, obj, key)
        for key in ops.iterate(vm.out, keys if found is None else found)
    }


def truth(vm: Interpreter, obj: Var) -> bool | None:
    """``bool(obj)`` when the registry handles ``obj``'s type."""
    tracker = tracker_of(obj)
    found = tracker.truth(vm, obj) if tracker is not None else None
    return None if found is None else ops.truth(vm.out, found)


# -- user-defined classes ---------------------------------------------------------------------


def _call_dunder(vm: Interpreter, obj: Var, name: str, args: list[Var]) -> Var | None:
    method = python_method(vm, obj, name)
    if method is None:
        return None
    return vm.call(vm.out.wrap(method, None), [obj, *args], {})


@register(object)
class UserObjectTracker(TypeTracker):
    """Instances of user classes: the class's own Python dunder methods, inlined."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        return _call_dunder(vm, obj, "__getitem__", [key])

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        return _call_dunder(vm, obj, "__setitem__", [key, value]) is not None

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        return _call_dunder(vm, obj, "__delitem__", [key]) is not None

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        found = _call_dunder(vm, obj, "__contains__", [item])
        if found is not None or python_method(vm, obj, "__iter__") is None:
            return found
        # No __contains__: Python compares against what __iter__ yields.
        iterator = as_iterable(vm, _call_dunder(vm, obj, "__iter__", []))
        assert iterator is not None
        for candidate in ops.iterate(vm.out, iterator):
            if ops.identical(vm.out, candidate, item) or ops.truth(
                vm.out, compare_op(vm, "==", item, candidate)
            ):
                return ConstVar(True)
        return ConstVar(False)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        return _call_dunder(vm, obj, "__len__", [])

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        return _call_dunder(vm, obj, "__iter__", [])

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        found = _call_dunder(vm, obj, "__bool__", [])
        if found is None and python_method(vm, obj, "__len__") is not None:
            size = _call_dunder(vm, obj, "__len__", [])
            assert size is not None
            return ops.compare(vm.out, "!=", size, ConstVar(0))
        return found

    def setattr(self, vm: Interpreter, obj: Var, name: str, value: Var) -> bool:
        if isinstance(obj, ObjectVar) and obj.source is None:
            return False  # a frame object the guards cannot name
        return _call_dunder(vm, obj, "__setattr__", [ConstVar(name), value]) is not None


@register(dict)
class DictSubclassTracker(UserObjectTracker):
    """Instances of dict/OrderedDict subclasses made while tracing: the class's Python
    overrides first, else the dict they are."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        found = super().getitem(vm, obj, key)
        if found is not None:
            return found
        view = _items_view(vm, obj)
        if view is None:
            return None
        return ops.getitem(vm.out, view, key)

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        if super().setitem(vm, obj, key, value):
            return True
        view = _items_view(vm, obj)
        if view is None:
            return False
        ops.setitem(vm.out, view, key, value)
        return True

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        if super().delitem(vm, obj, key):
            return True
        view = _items_view(vm, obj)
        if view is None:
            return False
        _dict_slot(vm, view, "__delitem__", [key], {})
        return True

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        found = _call_dunder(vm, obj, "__contains__", [item])
        if found is not None:
            return found
        view = _items_view(vm, obj)
        if view is None:
            return None
        vm.out.depend(view)  # a frame instance's keys (at dict.items(obj))
        return ConstVar(ops.const_value(vm.out, item) in view.box.items)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().length(vm, obj)
        if found is not None:
            return found
        view = _items_view(vm, obj)
        if view is None:
            return None
        vm.out.depend(view)
        return ConstVar(len(view.box.items))

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().iterate(vm, obj)
        if found is not None:
            return found
        view = _items_view(vm, obj)
        if view is None:
            return None
        return ops.make_iterator(vm.out, view)

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().truth(vm, obj)
        if found is not None:
            return found
        view = _items_view(vm, obj)
        if view is None:
            return None
        vm.out.depend(view)
        return ConstVar(bool(view.box.items))


@register(tuple, set, frozenset)
class BuiltinSubclassTracker(UserObjectTracker):
    """Instances of user subclasses of tuple/set/frozenset made in the trace (a NewObjectVar
    whose ``box.base`` is the tuple or set it is): the class's Python dunders first, else the
    base's own operation on that value, as the inherited C slot does (a set subclass's
    ``in`` is set's lookup even when the class defines ``__iter__``)."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        found = super().getitem(vm, obj, key)
        base = _base_of(obj)
        if found is not None or base is None:
            return found
        return vm.call(ObjectVar(operator.getitem), [base, key], {})

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        base = _base_of(obj)
        if base is None:
            return super().contains(vm, obj, item)
        found = _call_dunder(vm, obj, "__contains__", [item])
        if found is not None:
            return found
        return vm.call(ObjectVar(operator.contains), [base, item], {})

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().length(vm, obj)
        base = _base_of(obj)
        if found is not None or base is None:
            return found
        return vm.call(ObjectVar(len), [base], {})

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().iterate(vm, obj)
        base = _base_of(obj)
        if found is not None or base is None:
            return found
        return vm.call(ObjectVar(iter), [base], {})

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        found = super().truth(vm, obj)
        base = _base_of(obj)
        if found is not None or base is None:
            return found
        return vm.call(ObjectVar(bool), [base], {})


def _base_of(obj: Var) -> Var | None:
    return obj.box.base if isinstance(obj, NewObjectVar) else None


_SEQUENCE_BASES = (tuple, set, frozenset)


def new_builtin_instance(vm: Interpreter, cls_var: Var, value: Var) -> Var:
    """``tuple.__new__(cls, items)``, ``set.__new__(cls)``, ``frozenset.__new__(cls, items)``
    for a user subclass ``cls`` (from ``T(items)`` or a class's own ``__new__`` through
    ``super().__new__``): a user object that is ``value`` (a TupleVar, SetVar or frozenset).
    ``value`` itself when ``cls`` is the builtin."""
    cls = ops.const_value(vm.out, cls_var)
    if not isinstance(cls, type) or builtin_base(cls) not in _SEQUENCE_BASES:
        raise Unsupported(f"{builtin_base(type(cls)).__name__}.__new__({ops.describe(cls_var)})")
    if cls in _SEQUENCE_BASES:
        return value
    if any("__slots__" in k.__dict__ for k in cls.__mro__):
        raise Unsupported(f"creating an instance of {cls.__name__}, which uses __slots__")
    return NewObjectVar(ObjectBox(cls, {}, cls_source=cls_var.source, base=value))


def _items_view(vm: Interpreter, obj: Var) -> DictVar | None:
    """dict_view, and for an instance of a user dict subclass from the frame its items read
    through ``dict.items`` (mutations replayed by ``output.DictSubclassWrite``)."""
    view = dict_view(obj)
    if view is None and isinstance(obj, ObjectVar) and type(obj.value).__flags__ & _HEAPTYPE:
        view = _frame_dict_view(vm, obj)
    return view


def dict_view(obj: Var) -> DictVar | None:
    """The items of a dict-subclass instance made while tracing, as a DictVar sharing them."""
    if isinstance(obj, NewObjectVar) and obj.box.items is not None:
        return DictVar(obj.box.items)
    if isinstance(obj, DictVar):
        return obj
    return None


def new_items(cls: type) -> DictBox | None:
    """The (empty) items box of a new instance of ``cls``: a DictBox for dict subclasses."""
    if not issubclass(cls, dict):
        return None
    base = builtin_base(cls)
    if base not in (dict, collections.OrderedDict):
        raise Unsupported(f"creating an instance of {cls.__name__}, a {base.__name__} subclass")
    return DictBox({})


def builtin_base(cls: type) -> type:
    """The nearest class in ``cls.__mro__`` defined in C (``object``, ``dict``, OrderedDict)."""
    return next(k for k in cls.__mro__ if not k.__flags__ & _HEAPTYPE)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on classes made by a class statement


# -- C slots of object and dict, called on tracked values ----------------------------------------

_DICT_CLASSES = (dict, collections.OrderedDict)
_DICT_DUNDERS: dict[str, str] = {
    "__getitem__": "getitem", "__setitem__": "setitem", "__contains__": "contains",
    "__len__": "len", "__iter__": "iter", "__delitem__": "delitem", "__init__": "init",
}


def call_slot(vm: Interpreter, fn: object, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """``object.__getattribute__(obj, name)``, ``dict.__setitem__(obj, k, v)``, ... (the C
    methods ``super()`` resolves to) on tracked values; None when ``fn`` is not one."""
    owner = getattr(fn, "__objclass__", None)
    name = getattr(fn, "__name__", None)
    if owner is None or not isinstance(name, str):
        return slot_calls.exception_method(fn, args, kwargs)
    found = slot_calls.call_descriptor(vm, fn, args, kwargs)
    if found is not None or not args:  # set.__and__(p, q), frozenset.copy(p)
        return found
    base = _base_of(args[0])
    if owner in _SEQUENCE_BASES and base is not None:
        # A C method of set/tuple on an instance of a user subclass (``super().add(x)``,
        # ``s.union(t)``): the method on the set/tuple it is; set's results are plain sets.
        if name == "__init__":
            return _set_init(vm, base, args[1:], kwargs)
        return slot_calls.call_descriptor(vm, fn, [base, *args[1:]], kwargs)
    if (
        owner is object and name == "__getattribute__" and len(args) == 2 and not kwargs
        and isinstance(args[0], (ObjectVar, NewObjectVar))  # modules: their own lookup
    ):
        attr = ops.const_value(vm.out, args[1])
        if not isinstance(attr, str):
            raise Unsupported("object.__getattribute__ with a non-string name")
        return generic_getattr(vm, args[0], attr)
    if owner is object and name == "__init__" and isinstance(args[0], NewObjectVar):
        return ConstVar(None)
    if owner in _DICT_CLASSES:
        view = _items_view(vm, args[0])
        if view is None and name in _READ_ONLY_DICT_METHODS:
            view = _frame_dict_view(vm, args[0])
        if view is None:
            return None
        return _dict_slot(vm, view, name, args[1:], kwargs)
    return None


def _set_init(vm: Interpreter, base: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``set.__init__(obj, iterable=())``: the set emptied, then filled from the iterable."""
    if kwargs or len(args) > 1 or not isinstance(base, SetVar):
        raise Unsupported("set.__init__ with these arguments")
    elements = list(sets.set_operand(vm, args[0])) if args else []
    ops.note_set_mutation(vm.out, base)
    base.box.items.clear()
    base.box.items.update(elements)
    return ConstVar(None)


_READ_ONLY_DICT_METHODS = frozenset({
    "get", "keys", "values", "items", "copy", "__getitem__", "__contains__", "__len__",
    "__iter__",
})


def _frame_dict_view(vm: Interpreter, obj: Var) -> DictVar | None:
    """A dict subclass instance from the frame, read through ``dict``'s own methods (the
    class's overrides bypassed, as ``super().get`` does): its items as a DictVar read from
    ``dict(dict.items(obj))`` in guards and code, so that no user ``__getitem__``/``keys`` runs."""
    if not (isinstance(obj, ObjectVar) and isinstance(obj.value, dict) and obj.source):
        return None
    where = DictCopySource(obj.source)
    view = vm.out.wrap(where.get(obj.value, {}, {}), where)
    return view if isinstance(view, DictVar) else None


def _dict_slot(
    vm: Interpreter, view: DictVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    kind = _DICT_DUNDERS.get(name)
    out = vm.out
    if kind == "getitem":
        return ops.getitem(out, view, args[0])
    if kind == "setitem":
        ops.setitem(out, view, args[0], args[1])
        return ConstVar(None)
    if kind == "contains":
        return ConstVar(ops.const_value(out, args[0]) in view.box.items)
    if kind == "len":
        return ConstVar(len(view.box.items))
    if kind == "iter":
        return ops.make_iterator(out, view)
    if kind == "delitem":
        key = ops.const_value(out, args[0])
        if key not in view.box.items:
            out.depend(view)
            raise throw(KeyError, key)
        del view.box.items[key]
        ops.note_mutation(out, view)
        return ConstVar(None)
    if kind == "init":
        if args:
            call_method(vm, MethodVar(view, "update"), args, kwargs)
        elif kwargs:
            view.box.items.update(kwargs)
        return ConstVar(None)
    return call_method(vm, MethodVar(view, name), args, kwargs)


def generic_getattr(vm: Interpreter, obj: Var, name: str) -> Var:
    """``object.__getattribute__(obj, name)``: the lookup without the class's own override."""
    if name == "__dict__" and isinstance(obj, NewObjectVar):
        return DictVar(DictBox(obj.box.attrs))
    if isinstance(obj, ObjectVar):
        return object_attrs.object_attr(vm, obj, name, raw=True)
    if isinstance(obj, NewObjectVar):
        return object_attrs.new_object_attr(vm, obj, name)
    return attributes.getattr_var(vm, obj, name)
