"""Fuzz reproducer: program seed 2000008, backend eager (shrunk).

Found 2026-11-22 01:01 against symbolic_vm 6426cd1 (compiled raised the ZeroDivisionError that eager
catches); fixed by symbolic_vm 4e54a4f (no graph break inside a try block: the frame runs eagerly).

Found as: call 0: raised: ZeroDivisionError: integer division or modulo by zero
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

def fn(x, y, n, lst):
    try:
        z4 = 1 // (n * 0)
    except (ValueError, ZeroDivisionError):
        pass
"""

INPUTS = [{'lst': [-0.1, -0.58, 0.36], 'n': 0, 'x': [0.831, 1.25, 1.003], 'y': [-0.553, -0.991, 0.271]},
 {'lst': [-0.1, -0.58, 0.36], 'n': 0, 'x': [0.831, 1.25, 1.003], 'y': [-0.553, -0.991, 0.271]},
 {'lst': [0.82, 0.02, -0.96],
  'n': 0,
  'x': [-0.596, 0.347, -1.668],
  'y': [1.997, -1.533, -0.622]},
 {'lst': [-0.81, 0.49, 0.41],
  'n': 2,
  'x': [0.14, -0.229, 0.782, -1.665, 0.817, 0.638],
  'y': [-1.334, -0.428, 0.803, -0.543, -1.531, -0.61]}]


def test_division_by_zero_caught_in_try_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
