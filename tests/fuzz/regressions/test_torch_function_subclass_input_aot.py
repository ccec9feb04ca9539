"""Fuzz reproducer: program seed 186000002, backend aot_eager (shrunk).

Fixed: aot read the sizes, strides and dtype of a __torch_function__ subclass example input
(its cache key, the dynamic-shape check) before refusing it, so the subclass's hook ran for
aot's own reads; subclass inputs are now refused before any read.

Found as: call 3: globals: globals['LOG']: length 25 vs 33: ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf'] vs ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf',
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

class LogT(torch.Tensor):

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append('tf')
        return super().__torch_function__(func, types, args, kwargs or {})
U_UF0_1 = [False, False, False, True]

def extra_args(call, x, y, n):
    uf0_1 = y.as_subclass(LogT) if U_UF0_1[call] else y
    return (uf0_1,)

def fn(x, y, n, lst, uf0_1):
    tf0_2 = torch.add(uf0_1, x)
"""

INPUTS = [{'lst': [-0.0], 'n': 0, 'x': [-0.202, -0.921, -1.564], 'y': [-0.433, -1.791, -1.559]},
 {'lst': [-0.0], 'n': 0, 'x': [-0.202, -0.921, -1.564], 'y': [-0.433, -1.791, -1.559]},
 {'lst': [-0.63], 'n': 0, 'x': [-1.038, 0.934, -1.396], 'y': [1.813, 1.746, 0.709]},
 {'lst': [-0.34, 0.1],
  'n': 4,
  'x': [0.532, -1.947, 1.436, -0.642, -0.029, -0.668],
  'y': [1.27, -0.297, 1.377, -1.037, 0.913, 0.275]}]


def test_torch_function_subclass_input_aot_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'aot_eager', INPUTS)
    assert failure is None, str(failure)
