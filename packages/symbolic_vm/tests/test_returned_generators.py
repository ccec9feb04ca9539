"""A generator made in the compiled function that leaves it (returned, in a tuple, under zip)
before it ever ran: the output code calls the generator function again with the arguments the
trace bound, so the caller gets eager's own generator: lazy, of eager's type, with eager's
``send``/``throw``/``close`` and ``finally`` timing. One that already ran part of its body runs
the frame eagerly (fullgraph=True: Unsupported)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from feat_support import compiled, fresh_counter

from symbolic_vm import Unsupported

# torch.compile 2.13 (the reference for graph counts) returns these generators as iterators
# over values it computed at compile time; older releases refuse some of them.
TORCH_2_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)


def _torch_graphs(fn: Any, *args: Any) -> int:
    counter = fresh_counter()
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=counter, fullgraph=True)(*args)
    finally:
        torch._dynamo.reset()
    return counter.count


def steps(t: torch.Tensor, log: list[str]) -> Any:
    log.append("started")
    try:
        got = yield t + 1
        log.append(f"got {got}")
        yield t * 2
    finally:
        log.append("finally")


def test_returned_generator_runs_lazily_when_consumed_like_eager() -> None:
    def fn(t: torch.Tensor, log: list[str]) -> Any:
        return steps(t, log), t.sin()

    counter = fresh_counter()
    t = torch.randn(3)
    runs = []
    for run in (fn, compiled(fn, counter)):
        log: list[str] = []
        x = t.clone()
        gen, s = run(x, log)
        assert type(gen) is type(steps(x, []))
        assert log == []  # nothing of the body ran inside the call
        x.add_(10)  # the body reads the argument when resumed, not when made
        first = next(gen)
        second = gen.send("hi")
        with pytest.raises(StopIteration):
            next(gen)
        runs.append((first, second, s, log))
    (e1, e2, es, elog), (c1, c2, cs, clog) = runs
    assert torch.equal(c1, e1) and torch.equal(c2, e2) and torch.equal(cs, es)
    assert clog == elog == ["started", "got hi", "finally"]
    # (torch.compile 2.13 refuses this one: it would run the body, with its appends, early.)
    assert counter.count == 1


def test_returned_generator_close_runs_its_finally_at_close_like_eager() -> None:
    def fn(t: torch.Tensor, log: list[str]) -> Any:
        g = steps(t, log)
        return g, g  # one generator object, twice

    counter = fresh_counter()
    t = torch.randn(2)
    logs = []
    for run in (fn, compiled(fn, counter)):
        log: list[str] = []
        g1, g2 = run(t, log)
        assert g1 is g2
        assert torch.equal(next(g1), t + 1)
        log.append("closing")
        g1.close()
        logs.append(log)
    assert logs[1] == logs[0] == ["started", "closing", "finally"]


def test_zip_and_enumerate_over_a_returned_generator_are_eagers_objects() -> None:
    def gen(t: torch.Tensor, *extra: int, **scale: float) -> Any:
        yield t + sum(extra)
        yield t * scale["k"]

    def fn(t: torch.Tensor) -> Any:
        return zip(range(3), gen(t, 1, 2, k=3.0)), enumerate(gen(t + 1, k=0.5)), t.cos()

    counter = fresh_counter()
    t = torch.randn(2)
    ez, ee, ec = fn(t)
    cz, ce, cc = compiled(fn, counter)(t)
    assert type(cz) is zip and type(ce) is enumerate
    torch.testing.assert_close(list(cz), list(ez))
    torch.testing.assert_close(list(ce), list(ee))
    assert torch.equal(cc, ec)
    assert counter.count == 1
    if TORCH_2_13:
        assert _torch_graphs(fn, t) == counter.count


def test_generator_advanced_in_the_frame_then_returned_runs_the_frame_eagerly() -> None:
    def gen(t: torch.Tensor) -> Any:
        yield t + 1
        yield t + 2

    def fn(t: torch.Tensor) -> Any:
        g = gen(t)
        first = next(g)
        return g, first

    t = torch.randn(2)
    counter = fresh_counter()
    with pytest.raises(Unsupported, match="already ran part of its body or was closed"):
        compiled(fn, counter)(t)
    counter = fresh_counter()
    g, first = compiled(fn, counter, fullgraph=False)(t)
    assert torch.equal(first, t + 1)
    assert [torch.equal(v, t + 2) for v in g] == [True]


def test_generator_closed_before_it_started_then_returned_stays_closed() -> None:
    def fn(t: torch.Tensor) -> Any:
        g = steps(t, [])
        g.close()
        return g, t + 1

    t = torch.randn(2)
    for run in (fn, compiled(fn, fresh_counter(), fullgraph=False)):
        g, s = run(t)
        assert torch.equal(s, t + 1)
        with pytest.raises(StopIteration):
            next(g)
