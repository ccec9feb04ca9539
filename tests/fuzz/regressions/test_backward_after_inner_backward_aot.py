"""Fuzz reproducer: program seed 20261126000509, backend aot_eager (shrunk; not reduced further).

Fixed: the resumed graph took the first graph's output (its history freed by the inner
backward) as an input requiring grad; aot's one autograd node linked every output to it, so a
later backward walked into that freed history. Inputs that get no gradient are now detached.

Found as: call 0: backward: RuntimeError: eager None
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
    wf0_1 = torch.tensor(0.7, requires_grad=True)
    wf1_1 = torch.full_like(x, 0.5).requires_grad_()
    return (wf0_1, wf1_1)

def fn(x, y, n, lst, wf0_1, wf1_1):
    tf0_2 = torch.where(x > 0, x * wf0_1, wf0_1 / (y.abs() + 1.0))
    tf0_2.sum().backward()
    gf0_3 = wf0_1.grad.clone()
    tf0_2 = tf0_2.detach()
    with torch.no_grad():
        tf1_2 = x * wf1_1
    with torch.enable_grad():
        tf1_4 = y * wf1_1
    with torch.no_grad():
        tf1_6 = x * wf1_1
    if torch.is_grad_enabled():
        tf1_8 = x + wf1_1
    else:
        pass
    return (x, y, n, gf0_3, tf0_2, tf1_2, tf1_4, tf1_6, tf1_8)
"""

INPUTS = [{'lst': [0.94, 0.01, 0.6],
  'n': 5,
  'x': [-1.304, -0.831, 1.524, 1.038],
  'y': [0.059, 0.605, -0.056, -0.484]},
 {'lst': [0.94, 0.01, 0.6],
  'n': 5,
  'x': [-1.304, -0.831, 1.524, 1.038],
  'y': [0.059, 0.605, -0.056, -0.484]},
 {'lst': [0.49, -0.02, -0.46],
  'n': 5,
  'x': [-0.198, 1.682, 0.174, -1.873],
  'y': [0.709, -0.708, -0.433, -1.69]},
 {'lst': [0.51],
  'n': 5,
  'x': [0.808, 1.229, 1.32, 0.24, -1.13, -1.235],
  'y': [-0.189, -1.916, -1.088, 1.108, 0.505, -0.914]}]


def test_backward_after_inner_backward_aot_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'aot_eager', INPUTS)
    assert failure is None, str(failure)
