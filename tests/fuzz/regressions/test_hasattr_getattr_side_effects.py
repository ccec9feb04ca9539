"""Fuzz reproducer: program seed 184000000, backend eager (found by the side_effect_attrs family,
getattr_probe construct; minimized by hand from the shrunk program).

Found as: call 0: globals: globals['LOG']: length 2 vs 1: ['getattr missing', 'getattr nothing'] vs ['getattr missing']

Fixed (objcore, #20): hasattr on an object whose class has a Python __getattribute__/__getattr__
runs the lookup as getattr does (the hook traced as a call, its effects replayed every call).
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
LOG = []

class Obj:
    def __getattr__(self, name):
        LOG.append('getattr ' + name)
        return 1.5

def extra_args(call, x, y, n):
    return (Obj(),)

def fn(x, y, n, lst, o):
    q = hasattr(o, 'nothing')
    return (x + 1.0, q)
"""

INPUTS = [{'lst': [0.59], 'n': 4, 'x': [-0.496, 1.055, 0.943], 'y': [-0.826, -1.699, 1.831]},
 {'lst': [0.59], 'n': 4, 'x': [-0.496, 1.055, 0.943], 'y': [-0.826, -1.699, 1.831]},
 {'lst': [0.74], 'n': 4, 'x': [1.095, 1.655, 1.364], 'y': [0.997, 1.863, -1.059]},
 {'lst': [-0.99, -0.1], 'n': 2, 'x': [1.962, -0.438, -0.61, -1.051], 'y': [-0.805, 0.547, 1.736, 0.672]}]


def test_hasattr_getattr_side_effects_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
