"""Fixes of the session-4 red team's findings: tuple arguments rebuilt item by item are guarded
on their length (not their values), and attribute reads and stores on user objects that go
through a descriptor or a user ``__setattr__`` behave as in eager (traced, or a graph break).

Every compiled call is compared with eager on equal inputs; a counting backend counts compiles.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)  # a crash must surface
    compile_api.reset()
    yield
    compile_api.reset()


def _same(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    else:
        assert got == want


# -- tuple arguments -----------------------------------------------------------------------------


def returns_star_args(x: torch.Tensor, *args: Any) -> tuple[Any, ...]:
    return x * 2, args


def test_star_args_of_another_length_recompiles_and_matches_eager() -> None:
    backend = Counting()
    compiled = compile_api.compile(returns_star_args, backend=backend)
    x = torch.randn(3)
    for args in ((1, 2), (), (1, 2, 3), (7, 8)):
        _same(compiled(x, *args), returns_star_args(x, *args))
    assert backend.count == 3  # lengths 2, 0, 3; the second length-2 call reuses the first


def test_star_args_of_new_ints_of_the_same_length_do_not_recompile() -> None:
    # The items are read back from the argument, not guarded by value.
    backend = Counting()
    compiled = compile_api.compile(returns_star_args, backend=backend)
    x = torch.randn(3)
    for args in ((1, 2), (5, 6), (-3, 9)):
        _same(compiled(x, *args), returns_star_args(x, *args))
    assert backend.count == 1


def test_a_tuple_of_tensors_of_the_same_length_does_not_recompile() -> None:
    # The length guard is not a value guard: new tensors of the same shapes reuse the code.
    backend = Counting()
    compiled = compile_api.compile(returns_star_args, backend=backend)
    for _ in range(3):
        x, a, b = torch.randn(3), torch.randn(2), torch.randn(2)
        got, want = compiled(x, a, b), returns_star_args(x, a, b)
        _same(got, want)
        assert got[1][0] is a and got[1][1] is b  # the caller's tensors, not copies
    assert backend.count == 1


# -- attribute reads and stores through class protocols ---------------------------------------

LOG: list[object] = []


@pytest.fixture(autouse=True)
def _clear_log() -> Iterator[None]:
    LOG.clear()
    yield
    LOG.clear()


def _compare(fn: Any, make_args: Any) -> Counting:
    """``fn`` compiled vs eager on fresh equal arguments: result, LOG and argument state."""
    backend = Counting()
    compiled = compile_api.compile(fn, backend=backend)
    want_args, got_args = make_args(), make_args()
    want = fn(*want_args)
    want_log = list(LOG)
    LOG.clear()
    got = compiled(*got_args)
    assert LOG == want_log
    _same(got, want)
    for g, w in zip(got_args, want_args, strict=True):
        if not isinstance(w, torch.Tensor):
            assert vars(g) == vars(w) if hasattr(w, "__dict__") else g == w
    return backend


class Settable:
    def __init__(self) -> None:
        self._n = 0

    @property
    def n(self) -> int:
        return self._n

    @n.setter
    def n(self, v: int) -> None:
        LOG.append(("setter", v))
        self._n = v


def property_store_on_a_new_object(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    m = Settable()
    m.n = 5
    return x * m.n, m._n


def property_store_on_an_argument(x: torch.Tensor, m: Settable) -> torch.Tensor:
    m.n = 7
    return x * m.n


def test_a_property_setter_on_a_new_object_is_traced_in_one_graph() -> None:
    backend = _compare(property_store_on_a_new_object, lambda: (torch.ones(3),))
    assert backend.count == 1  # traced, not a break


def test_a_property_setter_on_an_argument_runs_and_the_object_ends_as_in_eager() -> None:
    backend = _compare(property_store_on_an_argument, lambda: (torch.ones(3), Settable()))
    assert backend.count == 1


class ReadOnly:
    @property
    def n(self) -> int:
        return 1


def store_to_a_read_only_property(x: torch.Tensor, m: ReadOnly) -> torch.Tensor:
    try:
        m.n = 2  # type: ignore[misc]
    except AttributeError:
        return x + 1
    return x


def test_a_store_to_a_read_only_property_raises_as_in_eager() -> None:
    _compare(store_to_a_read_only_property, lambda: (torch.ones(3), ReadOnly()))


class TimesTen:
    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return obj.__dict__.get("_v", 0) if obj is not None else self

    def __set__(self, obj: object, value: int) -> None:
        obj.__dict__["_v"] = value * 10


class HasTimesTen:
    v = TimesTen()


def descriptor_store_on_a_new_object(x: torch.Tensor) -> torch.Tensor:
    w = HasTimesTen()
    w.v = 3
    return x * w.v


def test_a_data_descriptor_store_on_a_new_object_matches_eager() -> None:
    _compare(descriptor_store_on_a_new_object, lambda: (torch.ones(3),))


class Doubles:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @functools.cached_property
    def doubled(self) -> torch.Tensor:
        LOG.append("computed")
        return self.t * 2


def cached_property_returned_with_its_object(x: torch.Tensor) -> tuple[torch.Tensor, Doubles]:
    d = Doubles(x)
    return d.doubled + d.doubled, d


def test_a_cached_property_is_computed_once_and_cached_on_the_rebuilt_object() -> None:
    backend = Counting()
    compiled = compile_api.compile(cached_property_returned_with_its_object, backend=backend)
    x = torch.randn(3)
    got, obj = compiled(x)
    assert LOG == ["computed"]  # once, as eager: the second read hits the instance dict
    torch.testing.assert_close(got, x * 4)
    torch.testing.assert_close(obj.__dict__["doubled"], x * 2)  # cached as eager caches it
    assert backend.count == 1


class LogsSetattr:
    def __setattr__(self, name: str, value: object) -> None:
        LOG.append(("setattr", name, value))
        object.__setattr__(self, name, value)


def store_through_custom_setattr_on_a_new_object(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    m = LogsSetattr()
    m.depth = 4
    return x * m.depth, m.depth


def store_through_custom_setattr_on_an_argument(x: torch.Tensor, m: LogsSetattr) -> torch.Tensor:
    m.depth = 4
    return x * m.depth


@pytest.mark.parametrize(
    ("fn", "make_args"),
    [
        (store_through_custom_setattr_on_a_new_object, lambda: (torch.ones(3),)),
        (store_through_custom_setattr_on_an_argument, lambda: (torch.ones(3), LogsSetattr())),
    ],
    ids=["new_object", "argument"],
)
def test_a_custom_setattr_runs_once_per_store(fn: Any, make_args: Any) -> None:
    for _ in range(2):  # the second call runs the cached code
        _compare(fn, make_args)
        LOG.clear()


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: int = 1


def frozen_dataclass(x: torch.Tensor) -> tuple[torch.Tensor, Frozen]:
    f = Frozen(a=3)
    return x * f.a + f.b, f


def test_object_setattr_in_a_frozen_dataclass_init_stays_in_the_graph() -> None:
    backend = Counting()
    compiled = compile_api.compile(frozen_dataclass, backend=backend)
    x = torch.randn(3)
    got, f = compiled(x)
    want, g = frozen_dataclass(x)
    torch.testing.assert_close(got, want)
    assert f == g
    assert backend.count == 1


class Slotted:
    __slots__ = ("k",)

    def __init__(self) -> None:
        self.k = 1


def slot_store_on_an_argument(x: torch.Tensor, s: Slotted) -> tuple[torch.Tensor, int]:
    s.k = 6
    return x * s.k, s.k


def test_a_slot_store_on_an_argument_is_replayed() -> None:
    backend = Counting()
    compiled = compile_api.compile(slot_store_on_an_argument, backend=backend)
    x, s = torch.ones(3), Slotted()
    got, k = compiled(x, s)
    torch.testing.assert_close(got, x * 6)
    assert k == 6 and s.k == 6
    assert backend.count == 1


# -- a constant used as a context manager --------------------------------------------------------


def factories_under_a_device(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.device("cpu"):
        a = torch.ones(3)
        print("inside")  # a break inside the block: the trace stopped after __enter__
    return a, x + 1


def test_a_device_block_leaves_no_torch_function_mode_behind() -> None:
    # torch.device's __enter__ pushes a mode; the trace used to call it for real and never
    # pop it (one mode left on the stack per compile, seen as a later recompile elsewhere).
    from torch.overrides import _get_current_function_mode_stack

    before = len(_get_current_function_mode_stack())
    compiled = compile_api.compile(factories_under_a_device, backend=Counting())
    x = torch.randn(3)
    for _ in range(2):
        _same(compiled(x), factories_under_a_device(x))
        assert len(_get_current_function_mode_stack()) == before
