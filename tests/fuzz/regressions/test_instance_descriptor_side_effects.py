"""Fuzz reproducer: program seed 5000003, backend eager (minimized by hand from the fuzzer's find).

Found as: call 3: globals: globals['LOG']: length 8 vs 10: ['desc_set', 'desc_get', 'desc_set', 'desc_get', 'desc_set', 'desc_get', 'desc_set', 'desc_get'] vs ['desc_set', 'desc_get', 'desc_set', 'desc_get', 'desc_set', 'desc_get', 'desc_set', 'desc_get', 'desc_get', 'desc_get']
"""

# ruff: noqa: E501
from __future__ import annotations

import pytest

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
        return obj.__dict__['dv']

    def __set__(self, obj, value):
        LOG.append('desc_set')
        obj.__dict__['dv'] = value

class Obj:
    d = Desc()

def extra_args(call, x, y, n):
    return (Obj(),)

def fn(x, y, n, lst, o):
    o.d = 3.0
    return (x * o.d,)
"""

INPUTS = [{'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.96], 'n': 1, 'x': [-1.324, -1.698], 'y': [-1.384, -0.843]},
 {'lst': [0.15], 'n': 1, 'x': [-0.653, -0.602], 'y': [0.312, -0.418]},
 {'lst': [0.34, 0.79],
  'n': 0,
  'x': [-0.093, 0.4, -0.645, -0.177],
  'y': [1.627, -1.314, -1.25, 1.746]}]


@pytest.mark.xfail(
    strict=True,
    reason='new (fuzz, not in issue 18): o.d = v; o.d through a data descriptor whose __get__/__set__ have side effects: __get__ runs extra times under compile on the recompile of call 3 (LOG 10 entries vs eager 8)',
)
def test_instance_descriptor_side_effects_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
