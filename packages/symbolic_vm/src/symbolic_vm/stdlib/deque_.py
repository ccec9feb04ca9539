"""``collections.deque`` made in the frame: an object whose items are a list (``attrs`` holds
them under ``_ITEMS`` and ``maxlen``), so aliasing and mutation work as for lists; returned, it
is rebuilt as ``deque(items, maxlen)`` (codegen.make_object). Every method CPython's deque has
is answered here with its bounded-length rule (appending to a full deque drops from the other
end) and its exceptions. A deque from the frame is read only (a ``list()`` snapshot);
changing one is Unsupported (a clean break).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from symbolic_vm import object_model, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.stdlib.collections_ import ListSnapshotSource
from symbolic_vm.values import (
    ConstVar,
    IteratorVar,
    IterBox,
    ListBox,
    ListVar,
    NewObjectVar,
    ObjectBox,
    ObjectVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

_ITEMS = "__strata_deque_items__"  # codegen.make_object reads the same name
deque = collections.deque


def _box(obj: Var) -> tuple[list[Var], int | None]:
    """The items list and maxlen of a deque made in the frame."""
    if not (isinstance(obj, NewObjectVar) and obj.box.cls is deque and _ITEMS in obj.box.attrs):
        if isinstance(obj, ObjectVar) and isinstance(obj.value, deque):
            raise Unsupported("changing a deque from the frame")
        raise Unsupported(f"a deque method on {ops.describe(obj)}")
    items = obj.box.attrs[_ITEMS]
    assert isinstance(items, ListVar)
    maxlen = obj.box.attrs["maxlen"]
    assert isinstance(maxlen, ConstVar)
    return items.box.items, maxlen.value


def _iterated(vm: Interpreter, iterable: Var) -> list[Var]:
    """Every value ``iterable`` yields, through its type's tracker first (another deque, a user
    iterable), as ``deque(iterable)`` and ``extend`` iterate it."""
    found = object_model.iterate(vm, iterable)
    return ops.iterate(vm.out, iterable if found is None else found)


def _values(vm: Interpreter, obj: Var) -> list[Var]:
    """A deque's items for reading: its list, or a frame deque's items as ``list(d)``."""
    if isinstance(obj, ObjectVar) and type(obj.value) is deque and obj.source is not None:
        vm.out.depend(obj)
        snapshot = vm.out.wrap(list(obj.value), ListSnapshotSource(obj.source))
        return ops.items(vm.out, snapshot)
    return _box(obj)[0]


@implements(deque)
def _make(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) > 2 or set(kwargs) - {"iterable", "maxlen"}:
        raise Unsupported("deque() with unexpected arguments")
    iterable = args[0] if args else kwargs.get("iterable")
    bound = args[1] if len(args) > 1 else kwargs.get("maxlen", ConstVar(None))
    maxlen = ops.const_value(vm.out, bound)
    if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
        raise throw(ValueError, "maxlen must be non-negative")
    values = [] if iterable is None else _iterated(vm, iterable)
    if maxlen is not None:
        values = values[max(0, len(values) - maxlen):] if maxlen else []
    return NewObjectVar(ObjectBox(deque, {_ITEMS: ListVar(ListBox(values)),
                                          "maxlen": ConstVar(maxlen)}))


def _push(items: list[Var], maxlen: int | None, value: Var, *, left: bool) -> None:
    if maxlen == 0:
        return
    if left:
        items.insert(0, value)
        if maxlen is not None and len(items) > maxlen:
            items.pop()
    else:
        items.append(value)
        if maxlen is not None and len(items) > maxlen:
            items.pop(0)


@implements(deque.append)
def _append(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, maxlen = _box(args[0])
    _push(items, maxlen, args[1], left=False)
    return ConstVar(None)


@implements(deque.appendleft)
def _appendleft(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, maxlen = _box(args[0])
    _push(items, maxlen, args[1], left=True)
    return ConstVar(None)


@implements(deque.extend)
def _extend(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, maxlen = _box(args[0])
    for value in _iterated(vm, args[1]):  # read first: d.extend(d) is allowed
        _push(items, maxlen, value, left=False)
    return ConstVar(None)


@implements(deque.extendleft)
def _extendleft(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, maxlen = _box(args[0])
    for value in _iterated(vm, args[1]):
        _push(items, maxlen, value, left=True)
    return ConstVar(None)


@implements(deque.pop)
def _pop(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, _ = _box(args[0])
    if not items:
        raise throw(IndexError, "pop from an empty deque")
    return items.pop()


@implements(deque.popleft)
def _popleft(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, _ = _box(args[0])
    if not items:
        raise throw(IndexError, "pop from an empty deque")
    return items.pop(0)


@implements(deque.rotate)
def _rotate(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, _ = _box(args[0])
    steps = ops.const_value(vm.out, args[1] if len(args) > 1 else kwargs.get("n", ConstVar(1)))
    if items:
        steps %= len(items)
        items[:] = items[len(items) - steps:] + items[: len(items) - steps]
    return ConstVar(None)


@implements(deque.clear)
def _clear(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    _box(args[0])[0].clear()
    return ConstVar(None)


@implements(deque.reverse)
def _reverse(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    _box(args[0])[0].reverse()
    return ConstVar(None)


@implements(deque.insert)
def _insert(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, maxlen = _box(args[0])
    if maxlen is not None and len(items) >= maxlen:
        raise throw(IndexError, "deque already at its maximum size")
    items.insert(ops.const_value(vm.out, args[1]), args[2])
    return ConstVar(None)


def _equal(vm: Interpreter, a: Var, b: Var) -> bool:
    """``a is b or a == b``, as a deque compares its items."""
    return ops.identical(vm.out, a, b) or ops.truth(vm.out, ops.compare(vm.out, "==", a, b))


def _position(vm: Interpreter, values: list[Var], wanted: Var) -> int:
    return next((i for i, value in enumerate(values) if _equal(vm, value, wanted)), -1)


@implements(deque.remove)
def _remove(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    items, _ = _box(args[0])
    where = _position(vm, items, args[1])
    if where < 0:
        raise throw(ValueError, f"{ops.const_value(vm.out, args[1])!r} is not in deque")
    del items[where]
    return ConstVar(None)


@implements(deque.index)
def _index(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 2 or kwargs:
        raise Unsupported("deque.index with bounds")
    where = _position(vm, _values(vm, args[0]), args[1])
    if where < 0:
        raise throw(ValueError, f"{ops.const_value(vm.out, args[1])!r} is not in deque")
    return ConstVar(where)


@implements(deque.count)
def _count(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values = _values(vm, args[0])
    wanted = args[1]
    return ConstVar(sum(1 for v in values if _equal(vm, v, wanted)))


@implements(deque.copy)
def _copy(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values = _values(vm, args[0])
    maxlen = args[0].box.attrs["maxlen"] if isinstance(args[0], NewObjectVar) else ConstVar(
        args[0].value.maxlen if isinstance(args[0], ObjectVar) else None
    )
    copied = ListVar(ListBox(list(values)))
    return NewObjectVar(ObjectBox(deque, {_ITEMS: copied, "maxlen": maxlen}))


class _DequeTracker(type_trackers.TypeTracker):
    """``d[i]``, ``d[i] = v``, ``del d[i]``, ``x in d``, ``len(d)``, ``iter(d)``, ``bool(d)``."""

    def getitem(self, vm: Interpreter, obj: Var, key: Var) -> Var | None:
        values = _values(vm, obj)
        index = ops.const_value(vm.out, key)
        if not isinstance(index, int):
            raise throw(TypeError, "sequence index must be integer, not "
                        f"'{type(index).__name__}'")
        if not -len(values) <= index < len(values):
            raise throw(IndexError, "deque index out of range")
        return values[index]

    def setitem(self, vm: Interpreter, obj: Var, key: Var, value: Var) -> bool:
        items, _ = _box(obj)
        index = ops.const_value(vm.out, key)
        if not isinstance(index, int) or not -len(items) <= index < len(items):
            raise throw(IndexError, "deque index out of range")
        items[index] = value
        return True

    def delitem(self, vm: Interpreter, obj: Var, key: Var) -> bool:
        items, _ = _box(obj)
        index = ops.const_value(vm.out, key)
        if not isinstance(index, int) or not -len(items) <= index < len(items):
            raise throw(IndexError, "deque index out of range")
        del items[index]
        return True

    def contains(self, vm: Interpreter, obj: Var, item: Var) -> Var | None:
        return ConstVar(_position(vm, _values(vm, obj), item) >= 0)

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        return ConstVar(len(_values(vm, obj)))

    def iterate(self, vm: Interpreter, obj: Var) -> Var | None:
        return IteratorVar(IterBox(list(_values(vm, obj))))

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        return ConstVar(bool(_values(vm, obj)))


type_trackers.register(deque)(_DequeTracker)
