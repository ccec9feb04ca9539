"""Fuzz reproducer: program seed 1000006, backend eager (minimized by hand from the fuzzer's find).

Found as: call 0: globals: globals['LOG']: length 13 vs 62: ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf'] vs ['tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf', 'tf',

Fixed (objcore, #20): inputs are faked, and tensor guards built and checked, under
torch._C.DisableTorchFunctionSubclass, so only the graph's own operations run the override.
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
CHECK_RNG_STATE = False  # issue 18 item 20 is another bug
LOG = []

class LogT(torch.Tensor):

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append('tf')
        return super().__torch_function__(func, types, args, kwargs or {})

def extra_args(call, x, y, n):
    return (y.clone().as_subclass(LogT),)

def fn(x, y, n, lst, u):
    return (u * 2.0,)
"""

INPUTS = [{'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.15], 'n': 1, 'x': [-0.653, -0.602], 'y': [0.312, -0.418]},
 {'lst': [0.34, 0.79],
  'n': 0,
  'x': [-0.093, 0.4, -0.645, -0.177],
  'y': [1.627, -1.314, -1.25, 1.746]}]


def test_torch_function_side_effects_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
