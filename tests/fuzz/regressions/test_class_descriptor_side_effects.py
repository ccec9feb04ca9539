"""Fuzz reproducer: program seed 5000002, backend eager (minimized by hand from the fuzzer's find).

Found as: call 3: globals: globals['LOG']: length 4 vs 6: ['desc_get', 'desc_get', 'desc_get', 'desc_get'] vs ['desc_get', 'desc_get', 'desc_get', 'desc_get', 'desc_get', 'desc_get']

Fixed (objcore, #20): a descriptor with a Python __get__ is traced as a call, and guards read
the descriptor from the class dicts (guards.ClassDictSource) instead of running it.
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

class Desc:

    def __get__(self, obj, owner=None):
        LOG.append('desc_get')
        return 2.0

class Obj:
    d = Desc()

def fn(x, y, n, lst):
    return (x * Obj.d,)
"""

INPUTS = [{'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.15], 'n': 1, 'x': [-0.653, -0.602], 'y': [0.312, -0.418]},
 {'lst': [0.34, 0.79],
  'n': 0,
  'x': [-0.093, 0.4, -0.645, -0.177],
  'y': [1.627, -1.314, -1.25, 1.746]}]


def test_class_descriptor_side_effects_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
