"""Operators on instances of user classes dispatched as CPython dispatches them: binary operators
(``__add__``, the reflected ``__radd__``, in-place ``__iadd__`` and the rule that a subclass's
reflected method goes first), rich comparisons with the NotImplemented fallbacks, unary
operators, ``__len__``/``__bool__`` (and ``__len__`` for truth), ``__contains__`` (and
``__iter__`` for ``in``), ``__getitem__``/``__setitem__``, ``__call__``, ``__iter__``/
``__next__`` and ``__enter__``/``__exit__``.

Each case runs eagerly, under compile_api.compile and under torch.compile (the same program,
fresh arguments, counting backends): the results, the exception eager raises, and the log of
the user methods called (order and count) equal eager's; our graph count is no more than
torch's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from counting_backend import Counting
from object_model_harness import run_three_ways, same

import compile_api

CALLS: list[str] = []


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()
    CALLS.clear()
    yield
    compile_api.reset()


def _check(fn: Any, make_args: Any, graphs: int = 1, torch_right: bool = True) -> list[str]:
    """``fn`` eagerly, under compile_api.compile and under torch.compile (fresh arguments
    each): equal results and equal logs of the user methods called; ``graphs`` graphs for us,
    no more than torch.compile's. Returns eager's log."""
    logs = []
    results = []
    counts = []
    for compiler in (None, "ours", "torch"):
        CALLS.clear()
        backend = Counting()
        if compiler == "ours":
            compile_api.reset()
            results.append(compile_api.compile(fn, backend=backend)(*make_args()))
        elif compiler == "torch":
            torch._dynamo.reset()
            try:
                results.append(torch.compile(fn, backend=backend)(*make_args()))
            except Exception as error:  # noqa: BLE001 - the reference's own failure
                results.append(error)  # torch 2.13 fails on some programs: no count then
            torch._dynamo.reset()
        else:
            results.append(fn(*make_args()))
        logs.append(list(CALLS))
        counts.append(backend.count)
    eager, ours, theirs = results
    same(ours, eager)
    torch_failed = isinstance(theirs, Exception)
    if torch_right and not torch_failed:
        try:
            same(theirs, eager)
        except AssertionError:
            # This torch release differs from eager here (2.11 words a failed '<' its own
            # way): it is no reference for the graph count.
            torch_failed = True
    assert logs[1] == logs[0], "user methods ran differently under compile_api.compile"
    # (torch.compile's log is not compared: 2.13 skips list()'s __len__ length hint.)
    assert counts[1] == graphs, f"graphs: ours, torch's {counts[1:]}"
    # torch 2.11 leaves some of these frames to eager (0 graphs) where 2.13 captures one.
    assert torch_failed or counts[1] <= max(counts[2], 1), f"graphs: ours, torch's {counts[1:]}"
    return logs[0]


class Vec:
    """A small vector of a tensor: arithmetic by dunder methods, each call logged."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __add__(self, other: Any) -> Any:
        CALLS.append(f"{type(self).__name__}.add")
        if isinstance(other, Vec):
            return Vec(self.t + other.t)
        if isinstance(other, (int, float)):
            return Vec(self.t + other)
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        CALLS.append(f"{type(self).__name__}.radd")
        if isinstance(other, (int, float, torch.Tensor)):
            return Vec(self.t + other)
        return NotImplemented

    def __mul__(self, k: Any) -> Any:
        CALLS.append("mul")
        return Vec(self.t * k)

    __rmul__ = __mul__

    def __sub__(self, other: Vec) -> Vec:
        CALLS.append("sub")
        return Vec(self.t - other.t)

    def __neg__(self) -> Vec:
        CALLS.append("neg")
        return Vec(-self.t)

    def __abs__(self) -> Vec:
        CALLS.append("abs")
        return Vec(self.t.abs())

    def __matmul__(self, other: Vec) -> torch.Tensor:
        CALLS.append("matmul")
        return self.t @ other.t


class Acc(Vec):
    """In place: ``+=`` changes the object itself."""

    def __iadd__(self, other: Any) -> Acc:
        CALLS.append("Acc.iadd")
        self.t = self.t + (other.t if isinstance(other, Vec) else other)
        return self


class Special(Vec):
    """A subclass that overrides the reflected method: ``Vec() + Special()`` asks it first."""

    def __radd__(self, other: Any) -> Any:
        CALLS.append("Special.radd")
        return Vec(self.t * 100 + other.t)


def _arith(x: torch.Tensor) -> Any:
    a, b = Vec(x), Vec(x + 1)
    c = a + b  # __add__
    d = 2 + a  # int's add is NotImplemented: __radd__
    e = x + a  # Tensor's add is NotImplemented for a Vec: __radd__
    f = 3 * a * 2  # __rmul__, __mul__
    g = -(a - b)  # __sub__, __neg__
    h = abs(g)  # __abs__
    acc = Acc(x)
    same_acc = acc
    acc += a  # __iadd__, in place
    acc += 1.5
    plain = a
    plain += b  # no __iadd__: __add__, a new object
    sub = a + Special(x)  # the subclass's __radd__ first
    return (c.t, d.t, e.t, f.t, g.t, h.t, acc.t, acc is same_acc, plain is a, plain.t, sub.t,
            a @ b, sum([a, b], 0).t)


def test_binary_reflected_and_in_place_operators_call_the_dunder_methods_as_eager() -> None:
    log = _check(_arith, lambda: (torch.arange(3.0),))
    assert log[:3] == ["Vec.add", "Vec.radd", "Vec.radd"]
    assert "Special.radd" in log and "Acc.iadd" in log


def _unsupported_operand(x: torch.Tensor) -> Any:
    a = Vec(x)
    try:
        a + "text"
    except TypeError as error:
        first = str(error)
    try:
        a - 1
    except AttributeError as error:  # __sub__ reads other.t
        second = str(error)
    try:
        "text" + a
    except TypeError as error:
        third = str(error)
    return x + 1, first, second, third


def test_operand_without_a_method_raises_the_type_error_eager_raises() -> None:
    CALLS.clear()
    runs = run_three_ways(_unsupported_operand, lambda: (torch.arange(3.0),))
    same(runs.ours, runs.eager)
    assert runs.ours[1] == "unsupported operand type(s) for +: 'Vec' and 'str'"
    assert runs.our_graphs == 1 and runs.their_graphs <= 1


class Version:
    """Ordered by a number; equal to an int of the same number (one direction only)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        CALLS.append("eq")
        if isinstance(other, Version):
            return self.n == other.n
        if isinstance(other, int):
            return self.n == other
        return NotImplemented

    def __lt__(self, other: Version) -> bool:
        CALLS.append("lt")
        if not isinstance(other, Version):
            return NotImplemented
        return self.n < other.n

    __hash__ = None  # type: ignore[assignment]


class NewVersion(Version):
    def __gt__(self, other: Version) -> bool:
        CALLS.append("NewVersion.gt")
        return self.n > other.n


class Opaque:
    pass


def _compare(x: torch.Tensor) -> Any:
    v1, v2, v1b = Version(1), Version(2), Version(1)
    o = Opaque()
    flags = [
        v1 == v1b,  # __eq__
        v1 != v2,  # object's __ne__ inverts __eq__
        v1 < v2,  # __lt__
        v2 > v1,  # no __gt__: the reflected __lt__ of the right operand
        3 == Version(3),  # int's == is NotImplemented: Version.__eq__ reflected
        v1 == "x",  # both NotImplemented: identity
        v1 != "x",
        o == o, o != Opaque(),  # object's defaults
        v1 < NewVersion(5),  # the subclass's reflected __gt__ first
    ]
    try:
        v1 < 3  # noqa: B015 - the TypeError is the point
    except TypeError as error:
        flags.append(str(error))
    return x * sum(1 for f in flags if f is True), flags


def test_rich_comparisons_fall_back_through_not_implemented_like_eager() -> None:
    log = _check(_compare, lambda: (torch.arange(3.0),))
    assert "NewVersion.gt" in log


class Bag:
    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __len__(self) -> int:
        CALLS.append("len")
        return len(self.items)

    def __iter__(self) -> Iterator[int]:
        CALLS.append("iter")
        return iter(self.items)

    def __getitem__(self, i: int) -> int:
        CALLS.append("getitem")
        return self.items[i]

    def __setitem__(self, i: int, v: int) -> None:
        CALLS.append("setitem")
        self.items[i] = v


class Flag:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __bool__(self) -> bool:
        CALLS.append("bool")
        return self.on

    def __len__(self) -> int:  # never asked: __bool__ wins
        CALLS.append("flag len")
        return 0

    def __contains__(self, item: object) -> bool:
        CALLS.append("contains")
        return item == "on" and self.on


def _containers(x: torch.Tensor) -> Any:
    bag, empty = Bag([1, 2, 3]), Bag([])
    bag[0] = 5
    n = 0
    if bag:  # __len__ for truth
        n += 1
    if not empty:
        n += 10
    if Flag(True) and not Flag(False):
        n += 100
    found = (2 in bag, 9 in bag, "on" in Flag(True), "on" in Flag(False))  # __iter__ for `in`
    return x * (n + len(bag) + bag[0] + bag[-1]), found, list(bag)


def test_len_bool_contains_and_item_methods_run_as_in_eager() -> None:
    log = _check(_containers, lambda: (torch.arange(3.0),))
    assert "flag len" not in log


class Countdown:
    """An iterator class: ``__iter__`` returns itself, ``__next__`` counts down."""

    def __init__(self, start: int) -> None:
        self.n = start

    def __iter__(self) -> Countdown:
        CALLS.append("iter")
        return self

    def __next__(self) -> int:
        CALLS.append(f"next {self.n}")
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


def _iterate(x: torch.Tensor) -> Any:
    total = x
    for i in Countdown(3):
        CALLS.append(f"body {i}")
        total = total + i
    it = iter(Countdown(2))
    first = next(it)
    rest = list(it)
    return total, first, rest, next(it, "done"), sum(Countdown(4))


def test_iterator_classes_interleave_next_and_the_loop_body_as_in_eager() -> None:
    log = _check(_iterate, lambda: (torch.arange(3.0),))
    assert log[:4] == ["iter", "next 3", "body 2", "next 2"]


class Scale:
    def __init__(self, k: float) -> None:
        self.k = k

    def __call__(self, t: torch.Tensor, bias: float = 0.0) -> torch.Tensor:
        CALLS.append("call")
        return t * self.k + bias


class Managed:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __enter__(self) -> Managed:
        CALLS.append("enter")
        return self

    def __exit__(self, *exc: object) -> None:
        CALLS.append(f"exit {exc[0] is None}")


def _call_and_with(x: torch.Tensor) -> Any:
    scale = Scale(3.0)
    with Managed([]) as m:
        y = scale(x, bias=1.0)
        m.log.append("inside")
    return y, m.log


def test_call_and_context_manager_methods_run_as_in_eager() -> None:
    log = _check(_call_and_with, lambda: (torch.arange(3.0),))
    assert log == ["enter", "call", "exit True"]


def _frame_objects(x: torch.Tensor, a: Vec, v: Version, bag: Bag) -> Any:
    return (x + a).t, (a * 2).t, v < Version(2), v == 1, len(bag), 2 in bag, bag[1]


def test_dunder_methods_of_objects_passed_in_run_as_in_eager() -> None:
    _check(
        _frame_objects, lambda: (torch.arange(3.0), Vec(torch.ones(3)), Version(1), Bag([1, 2]))
    )


class Pair:
    """Unpacked by ``a, b = pair`` through __iter__; hashed by its own __hash__."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __iter__(self) -> Iterator[Any]:
        CALLS.append("iter")
        yield self.a
        yield self.b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pair) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self) -> int:
        CALLS.append("hash")
        return hash((self.a, self.b))


class Unhashable:
    __hash__ = None  # type: ignore[assignment]


def _unpack_and_hash(x: torch.Tensor) -> Any:
    a, b = Pair(x, 2)
    first, *rest = Pair(1, x * 3)
    try:
        hash(Unhashable())
    except TypeError as error:
        message = str(error)
    return a * b, first, rest, hash(Pair(1, 2)) == hash(Pair(1, 2)), hash(Pair(3, 4)), message


def test_unpacking_and_hash_use_the_class_methods_as_in_eager() -> None:
    log = _check(_unpack_and_hash, lambda: (torch.arange(3.0),))
    assert log == ["iter", "iter", "hash", "hash", "hash"]


def _membership_in_lists(x: torch.Tensor, outside: Version) -> Any:
    versions = [Version(1), Version(2)]
    made = versions[0]
    return (
        x * (Version(2) in versions),  # __eq__ of each item, in order, until one is equal
        Version(7) in versions, made in versions, 3 in [Version(3)], outside in versions,
        outside in (outside,),
    )


def test_in_on_lists_and_tuples_of_user_objects_asks_their_eq() -> None:
    # torch.compile 2.13 answers False to ``3 in [Version(3)]`` (eager: True, through the
    # reflected Version.__eq__ after int's NotImplemented): its results are not compared.
    log = _check(
        _membership_in_lists, lambda: (torch.arange(3.0), Version(2)), torch_right=False
    )
    assert log[:2] == ["eq", "eq"]


class Labelled:
    def __init__(self, name: str, n: int) -> None:
        self.name, self.n = name, n

    def __repr__(self) -> str:
        CALLS.append("repr")
        return f"Labelled({self.name!r}, {self.n})"

    def __format__(self, spec: str) -> str:
        CALLS.append("format")
        return f"{self.name}:{self.n:{spec}}" if spec else str(self)


class OnlyStr:
    def __str__(self) -> str:
        CALLS.append("str")
        return "only"


def _texts(x: torch.Tensor, outside: Labelled) -> Any:
    made = Labelled("w", 3)
    return (
        x + 1, str(made), repr(made), f"{made}", f"{made:03d}", f"{made!r:>20}", f"{made!s}",
        format(made, "02d"), str(OnlyStr()), f"[{OnlyStr()}]", str(outside), f"{outside:x}",
    )


def test_str_repr_and_format_of_user_objects_trace_their_methods() -> None:
    # (torch.compile 2.13 fails inside Dynamo on this program: no graph count to compare.)
    log = _check(_texts, lambda: (torch.arange(3.0), Labelled("out", 255)))
    assert log[:2] == ["repr", "repr"]
