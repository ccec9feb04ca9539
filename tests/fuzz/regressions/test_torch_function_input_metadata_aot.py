"""Fuzz reproducer: program seed 20261128000106, backend aot_eager (shrunk; device campaign
seed 20261128). aot read the shape, strides and offset of a tensor-subclass input through its
__torch_function__ (user code: 9 extra log entries) before refusing the subclass; fixed in aot.api.

Found as: call 0: globals: globals['LOG']: length 27 vs 36: ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf'] vs ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf',
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
U_UF0_1 = [True, False, False, True]

def extra_args(call, x, y, n):
    uf0_1 = y.as_subclass(LogT) if U_UF0_1[call] else y
    return (uf0_1,)

def fn(x, y, n, lst, uf0_1):
    uf0_1.mul_(0.5)
"""

INPUTS = [{'lst': [-0.72, -0.96, -0.87],
  'n': 3,
  'x': [1.312, 1.226, 0.219, -1.911, -0.596],
  'y': [0.61, 1.033, -1.408, 0.203, -0.447]},
 {'lst': [-0.72, -0.96, -0.87],
  'n': 3,
  'x': [1.312, 1.226, 0.219, -1.911, -0.596],
  'y': [0.61, 1.033, -1.408, 0.203, -0.447]},
 {'lst': [0.6, -0.88, 0.08],
  'n': 3,
  'x': [-1.172, -0.247, 1.367, 0.072, -1.562],
  'y': [-1.296, -0.013, 1.646, 0.097, 1.916]},
 {'lst': [-0.48, -0.29],
  'n': 1,
  'x': [1.819, 1.432, 1.651, -1.897, -1.383, -0.285],
  'y': [0.32, 0.739, -1.79, 1.338, -0.271, 0.533]}]


def test_a_subclass_input_s_torch_function_runs_as_often_as_in_eager_under_aot() -> None:
    failure = check_source(SOURCE, 'aot_eager', INPUTS)
    assert failure is None, str(failure)
