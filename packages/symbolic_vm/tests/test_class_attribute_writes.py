"""A class attribute the trace stores, read back through an instance or a subclass
(``attributes._class_overlay_read``): eager reads the new value. An instance made in the
trace, of the written class or a subclass, and a subclass itself read the trace's value (one
graph, as torch.compile; a subclass that later defines the name recompiles); other reads (a
function stored, an instance from the frame) break, and give eager's result."""

from __future__ import annotations

from typing import Any

import torch
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

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


def test_a_subclass_reads_the_class_attribute_the_trace_wrote_in_one_graph() -> None:
    runs = run_three_ways(_through_a_subclass, _x, calls=3)
    same(runs.ours, runs.eager)
    assert runs.ours[1] == (2, 2)
    assert runs.our_graphs == 1
    with torch_reference():
        assert runs.our_graphs <= runs.their_graphs
    compile_api.reset()
    assert not compile_api.explain(_through_a_subclass)(*_x()).break_reasons
    assert _Counted.n == 0


def test_a_subclass_that_then_defines_the_name_recompiles() -> None:
    compile_api.reset()
    compiled = compile_api.compile(_through_a_subclass, backend="eager")
    assert compiled(*_x())[1] == (2, 2)
    _Child.n = 7  # now the subclass's own: the base class's write no longer shows through it
    try:
        assert compiled(*_x())[1] == _through_a_subclass(*_x())[1] == (7, 7)
    finally:
        del _Child.n
    assert _Counted.n == 0
