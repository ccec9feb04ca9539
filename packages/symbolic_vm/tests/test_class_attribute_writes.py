"""A class attribute the trace stores, read back through an instance or a subclass
(``attributes._class_overlay_read``): eager reads the new value. An instance made in the
trace, of the very class written, reads the trace's value (one graph, as torch.compile);
other reads (a subclass, a function stored) break, and give eager's result."""

from __future__ import annotations

from typing import Any

import torch
from object_model_harness import run_three_ways, same

import compile_api


class _Counted:
    n = 0

    def get(self) -> int:
        return self.n


class _Child(_Counted):
    pass


def _through_an_instance(x: torch.Tensor) -> Any:
    _Counted.n += 1
    seen = (_Counted().n, _Counted().get(), _Counted.n)
    _Counted.n -= 1
    return x * seen[0], seen


def _through_a_subclass(x: torch.Tensor) -> Any:
    _Counted.n += 2
    seen = (_Child().n, _Child.n)
    _Counted.n -= 2
    return x * seen[0], seen


def _x() -> tuple[torch.Tensor]:
    return (torch.linspace(-1.0, 1.0, 3),)


def test_an_instance_reads_the_class_attribute_the_trace_wrote_in_one_graph() -> None:
    runs = run_three_ways(_through_an_instance, _x, calls=3)
    same(runs.ours, runs.eager)
    assert runs.ours[1] == (1, 1, 1)
    assert runs.our_graphs == 1
    assert runs.our_graphs <= runs.their_graphs
    compile_api.reset()
    assert not compile_api.explain(_through_an_instance)(*_x()).break_reasons
    assert _Counted.n == 0


def test_a_subclass_read_after_a_class_write_breaks_and_matches_eager() -> None:
    runs = run_three_ways(_through_a_subclass, _x, calls=3)
    same(runs.ours, runs.eager)
    assert runs.ours[1] == (2, 2)
    compile_api.reset()
    reasons = [r.reason for r in compile_api.explain(_through_a_subclass)(*_x()).break_reasons]
    assert any("after the trace changed it on class" in r for r in reasons), reasons
    assert _Counted.n == 0
