"""``d[t]`` of a dict from the frame keyed by tensors (an optimizer's state, a cache keyed by
parameters): read in the graph as torch.compile reads it, the key found by identity.

Before: ``expected a Python constant, got a tensor``, a graph break at the read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import TORCH_2_13, GraphCounter


@pytest.fixture(autouse=True)
def torch_fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def read(d: dict[object, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    return d[x] + 3


def test_a_tensor_keyed_read_is_one_graph_like_torch_and_follows_the_key() -> None:
    x, other = torch.randn(10), torch.randn(10)
    d: dict[object, torch.Tensor] = {x: torch.randn(10), 3: torch.randn(10), other: torch.ones(10)}
    counts = []
    for compile_fn in (
        (compile_api.compile, torch.compile) if TORCH_2_13 else (compile_api.compile,)
    ):
        counter = GraphCounter()
        compiled = compile_fn(read, backend=counter)
        torch.testing.assert_close(compiled(d, x), read(d, x))
        torch.testing.assert_close(compiled(d, x), read(d, x))
        counts.append(counter.count)
        # another key of the same shape: its own value (a recompile), never x's
        torch.testing.assert_close(compiled(d, other), read(d, other))
        d[x] = torch.zeros(10)  # the value is read at call time
        torch.testing.assert_close(compiled(d, x), read(d, x))
    assert counts[0] == 1
    assert all(c == counts[0] for c in counts)


# -- stores: ``d[t] = v`` with a tensor key (tensor_key_stores) ------------------------------------
#
# Before: ``expected a Python constant, got a tensor``, a graph break at the store (2 graphs,
# torch.compile 1). Now the store is replayed after the graph with the key read again at its
# source (or taken from the graph's outputs for a tensor made in the function).


def _compilers() -> tuple[object, ...]:
    return (compile_api.compile, torch.compile) if TORCH_2_13 else (compile_api.compile,)


def _same_dict(a: dict[object, torch.Tensor], b: dict[object, torch.Tensor]) -> None:
    """The same keys (by identity, in order) holding equal values."""
    assert len(a) == len(b)
    for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
        assert ka is kb
        torch.testing.assert_close(va, vb)


def store(d: dict[object, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    d[x] = y * 2
    return y + 1


def store_then_read(
    d: dict[object, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    d[x] = y * 2
    d[x] = d[x] + 1  # the second store wins, and the read sees the first
    return d[x] + (x in d)


@pytest.mark.parametrize("fn", [store, store_then_read])
def test_a_tensor_keyed_store_is_one_graph_like_torch_and_leaves_the_dict_as_eager(fn) -> None:  # type: ignore[no-untyped-def]
    firsts = []
    for compile_fn in _compilers():
        torch._dynamo.reset()
        x, other = torch.randn(4), torch.randn(4)
        d = {other: torch.ones(4)}
        expected = {other: d[other]}
        counter = GraphCounter()
        compiled = compile_fn(fn, backend=counter)  # type: ignore[operator]
        for call in range(3):  # x stored, then stored over
            y = torch.randn(4)
            torch.testing.assert_close(compiled(d, x, y), fn(expected, x, y))
            _same_dict(d, expected)
            if call == 0:
                firsts.append(counter.count)
        # another key (a recompile: the key is pinned by identity), its own entry
        y = torch.randn(4)
        torch.testing.assert_close(compiled(d, other, y), fn(expected, other, y))
        _same_dict(d, expected)
        if compile_fn is compile_api.compile:
            # torch.compile also recompiles when the dict's length changed (its guard on the
            # dict); Strata's trace relies on nothing the dict holds: one graph per key
            assert counter.count == 2
    assert firsts[0] == 1
    assert all(c == firsts[0] for c in firsts)


def store_made_key(d: dict[object, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t = x * 2
    d[t] = x + 1
    return t, d[t] * 3


def test_a_key_made_in_the_function_is_the_tensor_returned_like_eager() -> None:
    firsts = []
    for compile_fn in _compilers():
        torch._dynamo.reset()
        other = torch.randn(4)
        d = {other: torch.ones(4)}
        counter = GraphCounter()
        compiled = compile_fn(store_made_key, backend=counter)  # type: ignore[operator]
        for call in range(3):
            x = torch.randn(4)
            t, read = compiled(d, x)
            expected: dict[object, torch.Tensor] = {other: torch.ones(4)}
            et, eread = store_made_key(expected, x)
            torch.testing.assert_close(t, et)
            torch.testing.assert_close(read, eread)
            assert len(d) == call + 2
            assert list(d)[-1] is t  # the key stored is the very tensor returned
            torch.testing.assert_close(d[t], expected[et])
            if call == 0:
                firsts.append(counter.count)
    assert firsts[0] == 1
    assert all(c == firsts[0] for c in firsts)


class Cached(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.cache: dict[object, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.cache[self.lin.weight] = y.sum(0)
        return y.relu()


def test_a_parameter_key_is_read_again_at_its_source() -> None:
    firsts = []
    for compile_fn in _compilers():
        torch._dynamo.reset()
        m = Cached()
        m.cache[m.lin.bias] = torch.zeros(4)  # a dict keyed by tensors already
        twin = Cached()
        twin.load_state_dict(m.state_dict())
        twin.cache = {m.lin.bias: torch.zeros(4)}
        counter = GraphCounter()
        compiled = compile_fn(m, backend=counter)  # type: ignore[operator]
        for call in range(2):
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x), twin(x))
            assert list(m.cache) == [m.lin.bias, m.lin.weight]
            assert list(m.cache)[1] is m.lin.weight
            torch.testing.assert_close(m.cache[m.lin.weight], twin.cache[twin.lin.weight])
            if call == 0:
                firsts.append(counter.count)
    assert firsts[0] == 1
    assert all(c == firsts[0] for c in firsts)


CACHE: dict[object, torch.Tensor] = {}
KEY = torch.randn(4)


def store_global(y: torch.Tensor) -> torch.Tensor:
    CACHE[KEY] = y * 5
    return CACHE[KEY] - 1


def test_a_global_dict_and_a_global_key() -> None:
    firsts = []
    for compile_fn in _compilers():
        torch._dynamo.reset()
        CACHE.clear()
        CACHE[torch.randn(1)] = torch.ones(1)  # keyed by tensors already
        counter = GraphCounter()
        compiled = compile_fn(store_global, backend=counter)  # type: ignore[operator]
        y = torch.randn(4)
        torch.testing.assert_close(compiled(y), y * 5 - 1)
        assert list(CACHE)[-1] is KEY
        torch.testing.assert_close(CACHE[KEY], y * 5)
        firsts.append(counter.count)
    CACHE.clear()
    assert firsts[0] == 1
    assert all(c == firsts[0] for c in firsts)


def store_then_len(d: dict[object, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    d[x] = y
    return y + len(d)


def test_the_length_after_a_store_is_eager_s() -> None:
    # the trace does not know what the real dict holds: len() still breaks, never a stale count
    compiled = compile_api.compile(store_then_len, backend="eager")
    x, other = torch.randn(4), torch.randn(4)
    for _ in range(2):
        d = {other: torch.ones(4)}
        y = torch.randn(4)
        torch.testing.assert_close(compiled(d, x, y), y + 2)
        assert list(d)[-1] is x
    d = {other: torch.ones(4), x: torch.ones(4)}  # x already there: the length stays 2
    torch.testing.assert_close(compiled(d, x, y), y + 2)
