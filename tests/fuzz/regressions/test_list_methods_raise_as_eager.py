"""Fuzz find of the exceptions family (seed 501, programs 5 and 25: an internal error).

``lst.index(99.0)`` on a missing value raised ValueError inside the VM (its compile crashed and
the frame ran eagerly) where the program catches it; ``list.pop`` out of range the same with
IndexError. ``lst.index(v, start)`` ignored ``start`` (a wrong index). Fixed in
symbolic_vm.methods: these raise the program's own exception, and index takes start/stop.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import compile_api
from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []

def fn(x, y, n, lst):
    t = y * 0.5
    try:
        q = lst.index(99.0)
        t = t + 1.0
    except ValueError:
        LOG.append('ValueError')
        t = t + x
    return (t,)
"""

INPUTS = [
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [0.4, -1.642], "y": [1.942, 1.26], "n": 5, "lst": [0.84]},
    {"x": [-1.473, 1.66], "y": [0.396, -0.491], "n": 1, "lst": [-0.98]},
    {"x": [1.483, -0.631, 0.5], "y": [1.343, 0.087, 0.1], "n": 3, "lst": [-0.87, 0.5]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_missing_list_index_is_caught_as_eager(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)


def test_list_methods_raise_and_answer_as_eager() -> None:
    def fn(x: torch.Tensor, lst: list[float]) -> tuple[torch.Tensor, list[object], list[float]]:
        out: list[object] = []
        for op in range(5):
            try:
                if op == 0:
                    q: object = lst.index(2.0, 1)
                if op == 1:
                    q = lst.pop(7)
                if op == 2:
                    q = lst.remove(9.0)  # type: ignore[func-returns-value]
                if op == 3:
                    q = [].pop()
                if op == 4:
                    q = lst.count(2.0)
            except (ValueError, IndexError) as e:
                q = (type(e).__name__, e.args)
            out.append(q)
        return x + 1, out, lst

    eager = fn(torch.ones(1), [2.0, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not compile" fallback
        got = compile_api.compile(fn, backend="eager")(torch.ones(1), [2.0, 1.0, 2.0])
    assert got[1] == eager[1] and got[2] == eager[2]
    assert eager[1][0] == 2
