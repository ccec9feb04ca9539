"""Fuzz find of the py_objects family (seed 401, program 7, eager and aot_eager; 2026-11-27).

A generator left suspended in a frame that breaks (its statements run as bytecode) ran its
``finally`` when the frame ended on the first calls, but not on a call that recompiled (new
``lst`` values): explaining the failed guards (``CompiledGuards.failures``) built a closure that
called itself, a reference cycle holding the frame's locals, so the generator lived until the
next garbage collection. Fixed in guards (the reader is a method). The runner's garbage
collector may run at any time, so the test turns it off to see the late finalisation.
"""

from __future__ import annotations

import gc

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
            LOG.append(('gen step', i))
    finally:
        LOG.append('gen finally')

def fn(x, y, n, lst):
    g = pyo_gen(y, n + 1)
    t = next(g)
    it = iter(enumerate([y, x]))
    q = next(it)
    print('brk', 'it')
    t8 = q[1] * q[0] + next(it)[1]
    for v5 in lst:
        x = x * v5
        t.add_(t - (t8 >= 0).sum().float())
    return t, x
"""

INPUTS = [
    {"x": [0.4, -1.642, 0.92], "y": [1.942, 1.26, 1.135], "n": 5, "lst": [0.84, -0.94, -0.31]},
    {"x": [0.4, -1.642, 0.92], "y": [1.942, 1.26, 1.135], "n": 5, "lst": [0.84, -0.94, -0.31]},
    {"x": [-1.473, 1.66, 0.068], "y": [0.396, -0.491, -1.693], "n": 5, "lst": [-0.98, -0.28]},
    {"x": [1.483, -0.631], "y": [1.343, 0.087], "n": 1, "lst": [-0.87]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_generator_runs_its_finally_at_the_frame_end_after_a_recompile(backend: str) -> None:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        failure = check_source(SOURCE, backend, INPUTS)
    finally:
        if was_enabled:
            gc.enable()
    assert failure is None, str(failure)
