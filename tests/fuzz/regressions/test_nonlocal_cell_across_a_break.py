"""Fuzz find of the py_objects family (seed 402: 24 of 150 programs, eager and aot_eager).

A closure made in the frame rebinds a ``nonlocal`` of the frame on both sides of a graph break:
the resume function made its own cell for the variable while the closure, rebuilt for it after
the graph (23b464b), got a fresh cell of its own, so the frame's ``v`` stayed 1 where eager
reads 2. Fixed in symbolic_vm.breaks.policy (plan_crossing): a function made in the frame that
shares a cell with it and lives at a break makes the frame run eagerly (torch.compile gets 2 as
well).
"""

from __future__ import annotations

import pytest
import torch

import compile_api
from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

def fn(x, y, n, lst):
    v = 0
    def bump(a):
        nonlocal v
        v += 1
        return a * v
    t = bump(x)
    print('brk', v)
    t = t + bump(y)
    q = v
    return t, q
"""

INPUTS = [
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [-1.473, 1.66], "y": [0.396, -0.491], "n": 5, "lst": [-0.98]},
    {"x": [1.483, -0.631, 0.5], "y": [1.343, 0.087, 0.1], "n": 1, "lst": [-0.87]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_nonlocal_rebound_on_both_sides_of_a_break_matches_eager(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)


def test_torch_compile_agrees() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        v = 0

        def bump(a: torch.Tensor) -> torch.Tensor:
            nonlocal v
            v += 1
            return a * v

        t = bump(x)
        print("brk", v)
        return t + bump(x), v

    x = torch.ones(2)
    compile_api.config.suppress_errors = False
    ours = compile_api.compile(fn, backend="eager")(x)
    theirs = torch.compile(fn, backend="eager")(x)
    assert ours[1] == theirs[1] == fn(x)[1] == 2
    torch.testing.assert_close(ours[0], fn(x)[0])
