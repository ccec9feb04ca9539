"""Calling a weak reference inside a compiled function: what the trace reads through the
referent is guarded, so another referent, or the same one with other attribute values, gives
eager's answer (it reused the first call's graph: the reference was guarded by its type only
and the referent tracked without a source). Each call is compared with eager on the same
inputs; a reference made in the trace (``weakref.ref(obj)``) answers ``obj`` itself."""

from __future__ import annotations

import gc
import weakref

import torch

import compile_api


class Holder:
    def __init__(self, a: float) -> None:
        self.a = a


def through_an_argument(x: torch.Tensor, r: weakref.ref[Holder]) -> torch.Tensor:
    return x + r().a  # type: ignore[union-attr]


def made_in_the_frame(x: torch.Tensor, o: Holder) -> torch.Tensor:
    r = weakref.ref(o)
    return x * r().a  # type: ignore[union-attr]


def maybe_dead(x: torch.Tensor, r: weakref.ref[Holder]) -> torch.Tensor:
    o = r()
    return x if o is None else x - o.a


def across_a_break(x: torch.Tensor, r: weakref.ref[Holder]) -> torch.Tensor:
    y = x + 1
    torch._dynamo.graph_break()
    return y * r().a  # type: ignore[union-attr]


def _check(fn, calls) -> None:  # type: ignore[no-untyped-def]
    compiled = compile_api.compile(fn)
    for make in calls:
        args = make()
        expected = fn(*args)
        got = compiled(*args)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_an_attribute_read_through_a_weak_reference_argument_is_guarded() -> None:
    x = torch.arange(3.0)
    held = Holder(1.0)
    ref = weakref.ref(held)

    def with_a(a: float):  # type: ignore[no-untyped-def]
        def make():  # type: ignore[no-untyped-def]
            held.a = a
            return x, ref
        return make

    other = Holder(5.0)
    _check(through_an_argument, [with_a(1.0), with_a(2.0), lambda: (x, weakref.ref(other))])
    _check(across_a_break, [with_a(3.0), with_a(4.0), lambda: (x, weakref.ref(other))])


def test_a_weak_reference_made_in_the_trace_answers_its_referent_with_its_guards() -> None:
    x = torch.arange(3.0)
    held = Holder(1.0)

    def with_a(a: float):  # type: ignore[no-untyped-def]
        def make():  # type: ignore[no-untyped-def]
            held.a = a
            return x, held
        return make

    _check(made_in_the_frame, [with_a(1.0), with_a(2.0), lambda: (x, Holder(7.0))])


def test_a_dead_then_live_weak_reference_answers_as_eager() -> None:
    x = torch.arange(3.0)
    gone = Holder(1.0)
    dead = weakref.ref(gone)
    del gone
    gc.collect()
    assert dead() is None
    alive = Holder(2.0)
    _check(maybe_dead, [lambda: (x, dead), lambda: (x, weakref.ref(alive)), lambda: (x, dead)])
