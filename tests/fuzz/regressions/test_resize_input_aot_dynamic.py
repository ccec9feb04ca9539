"""Fuzz reproducer: program seed 21000002, backend aot_eager (minimized by hand from the fuzzer's find).

Found as: call 3: inputs: inputs[4]: torch.float32[1] vs torch.float32[3]
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

def extra_args(call, x, y, n):
    return (torch.tensor([0.5, 1.0, 2.0]),)

def fn(x, y, n, lst, c):
    c.resize_(1)
    return (x * 2.0,)
"""

INPUTS = [{'lst': [0.0, -0.49], 'n': 4, 'x': [0.75, 1.317], 'y': [-1.177, 0.858]},
 {'lst': [0.0, -0.49], 'n': 4, 'x': [0.75, 1.317], 'y': [-1.177, 0.858]},
 {'lst': [0.25, -0.99], 'n': 4, 'x': [0.917, -0.043], 'y': [-0.348, 0.866]},
 {'lst': [-0.63, -0.62],
  'n': 2,
  'x': [0.802, 1.858, 0.898, 1.715, 1.673],
  'y': [-0.003, -1.642, -0.95, -1.936, -0.286]}]


def test_resize_input_aot_dynamic_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'aot_eager', INPUTS)
    assert failure is None, str(failure)
