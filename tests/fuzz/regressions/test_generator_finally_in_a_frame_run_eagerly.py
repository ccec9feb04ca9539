"""Fuzz find of the CI slice with the py_objects family (seed 2026, program 9, eager; 2026-11-27).

A generator left suspended, a break while it lives (its statements run as bytecode), then a
function made in the frame with a ``nonlocal`` cell: the resume function runs eagerly, and the
record of that decision kept its GraphBreakNeeded with the traceback, whose frames held the
resume frame and its locals until ``reset()``: the generator's ``finally`` never ran. Fixed in
compile_api (a kept error drops the tracebacks of its chain).
"""

from __future__ import annotations

import pytest

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []

def pyo_gen(v, steps):
    try:
        for i in range(steps):
            yield (v * (i + 1))
    finally:
        LOG.append('gen finally')

def fn(x, y, n, lst):
    g = pyo_gen(x + y, 3)
    t = next(g)
    torch._dynamo.graph_break()
    c = 0
    def bump(a):
        nonlocal c
        c += 1
        return a * c
    torch._dynamo.graph_break()
    return (y * bump(t), n)
"""

INPUTS = [
    {"x": [0.4, -1.642, 0.92], "y": [1.942, 1.26, 1.135], "n": 5, "lst": [0.84, -0.94]},
    {"x": [0.4, -1.642, 0.92], "y": [1.942, 1.26, 1.135], "n": 5, "lst": [0.84, -0.94]},
    {"x": [-1.473, 1.66, 0.068], "y": [0.396, -0.491, -1.693], "n": 5, "lst": [-0.98]},
    {"x": [1.483, -0.631], "y": [1.343, 0.087], "n": 1, "lst": [-0.87]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_generator_runs_its_finally_when_a_resumed_frame_runs_eagerly(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)
