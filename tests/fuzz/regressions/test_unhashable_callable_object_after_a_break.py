"""A user object whose class defines ``__eq__`` and no ``__hash__`` (so ``__hash__`` is None),
called after a graph break, compiles.

Found by the ``class_objects`` family (seed 603, session 10: 6 of 30 programs): in the resume
function the object is an input, and calling it reached symbolic_vm's torch-call dispatch, whose
table lookups hashed it: ``TypeError: unhashable type`` inside the VM, so the frame ran eagerly
with a "Strata could not compile" warning.
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
class Vec:
    def __init__(self, t):
        self.t = t
    def __bool__(self):
        return bool(self.t.sum() > 0)
    def __call__(self, s):
        LOG.append(('call', s))
        return self.t * s
    def __eq__(self, o):
        return isinstance(o, Vec) and torch.equal(self.t, o.t)
def fn(x, y, n, lst):
    v = Vec(x - y)
    if v:
        t = v(2.0)
    else:
        t = v(-1.0)
    return (t, v == Vec(x - y))
"""

INPUTS = [
    {"x": [1.0, -2.0, 3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5]},
    {"x": [1.0, -2.0, 3.0], "y": [0.5, 0.5, 0.5], "n": 2, "lst": [0.5]},
    {"x": [-1.0, -2.0, 0.0], "y": [0.5, 1.5, 0.5], "n": 3, "lst": [0.25]},
    {"x": [1.5, -2.0, 0.25, 4.0], "y": [0.5, 1.5, 0.5, -1.0], "n": 3, "lst": [0.25]},
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_unhashable_callable_object_after_a_break_compiles(backend: str) -> None:
    failure = check_source(SOURCE, backend, INPUTS)
    assert failure is None, str(failure)
