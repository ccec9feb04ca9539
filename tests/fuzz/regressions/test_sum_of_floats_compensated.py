"""Fuzz find of the 10,000-program run (seed 20261129, program 5006; Python 3.12, torch 2.11).

``x *= h0(x, ...) * sum(lst)`` with ``lst = [-0.77, 0.18, 0.59]`` gave half of eager's values
on eager and aot_eager. Cause: the VM folded ``sum()`` as a left fold of ``+``; CPython 3.12+
sums a run of floats with compensation (Neumaier): ``sum([-0.77, 0.18, 0.59])`` is -5.55e-17
there, -1.11e-16 folded, and ``sum([1e16, 1.0, -1e16])`` is 1.0 against 0.0. Fixed: the leading
run of constant numbers is added by the builtin itself (with a guard on each value), what
follows a tensor by ``+`` as CPython does; a float run that meets a symbolic number breaks.
On Python 3.11 the builtin is the left fold, so these tests pass there either way: they guard
the 3.12/3.13 runs (CI on the GPU machine is 3.12).
"""

from __future__ import annotations

from typing import Any

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
    try:
        raise ValueError('boom')
    except ValueError:
        x *= x * sum(lst)
    return x, sum(lst), sum(lst, 0.5), sum([1e16, 1.0, -1e16]), sum([0.1, y, 0.2])
"""

INPUTS = [
    {"x": [-0.467, -0.827], "y": [0.137, 0.193], "n": 2, "lst": [0.12, -0.92, 0.54]},
    {"x": [-0.467, -0.827], "y": [0.137, 0.193], "n": 2, "lst": [0.12, -0.92, 0.54]},
    {"x": [1.299, 1.013], "y": [-0.521, -0.544], "n": 2, "lst": [-0.13, 0.35, -0.77]},
    {"x": [-0.38, -0.114, 1.3], "y": [-0.031, -1.804, 0.6], "n": 2, "lst": [-0.77, 0.18, 0.59]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_sum_of_float_list_compiled_matches_eager(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)


def _sums(x: torch.Tensor, lst: list[float]) -> tuple[Any, ...]:
    return x * sum(lst), sum(lst), sum(lst, 0.25), sum(v * 2.0 for v in lst), sum([*lst, x])


@pytest.mark.parametrize(
    "lst", [[-0.77, 0.18, 0.59], [1e16, 1.0, -1e16], [0.1] * 10, [1, 2.5, True]]
)
def test_sum_matches_the_builtin(lst: list[float]) -> None:
    # torch.compile is not the reference here: on Python 3.12 (torch 2.11 and 2.13) it folds
    # sum() left to right and returns 0.0 for [1e16, 1.0, -1e16] and 0.9999999999999999 for ten
    # 0.1s, where the builtin returns 1.0 (measured 2026-11-26, docs/python312-2026-11-27.md).
    x = torch.tensor([1.0, -3.0])
    expected = _sums(x, lst)
    compile_api.reset()
    got = compile_api.compile(_sums, backend="eager", fullgraph=True)(x, lst)
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, torch.Tensor):
            assert torch.equal(e, g), (lst, e, g)
        else:
            assert type(e) is type(g) and e == g, (lst, e, g)
    compile_api.reset()
