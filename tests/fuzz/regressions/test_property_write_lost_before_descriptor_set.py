"""Fuzz reproducer: program seed 190000024, backend eager (shrunk; side_effect_attrs family,
seed 190: 19 of 100 programs, eager and aot_eager backends, on main after aca22eb). The
descriptor wrote obj.__dict__, whose view (read at entry) was written back after the
attribute store and undid it; attr_stores now shows stores in a tracked __dict__ view.

Found as: call 0: inputs: inputs[4].__dict__['hits']: 1 vs 0
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

class Desc:

    def __set__(self, obj, value):
        obj.__dict__['dv'] = value

class Obj:
    d = Desc()

    def __init__(self, v):
        self.v = v
        self.hits = 0

    @property
    def scale(self):
        self.hits += 1
        return self.v
V_OF0_1 = [0.5, 0.5, -1.0, 3]

def extra_args(call, x, y, n):
    of0_1 = Obj(V_OF0_1[call])
    return (of0_1,)

def fn(x, y, n, lst, of0_1):
    if of0_1.scale > 1.0:
        pass
    else:
        tf0_4 = y - 1.0
    of0_1.d = x.sum()
"""

INPUTS = [{'lst': [-0.01],
  'n': 2,
  'x': [-1.268, -1.575, -0.077, 1.949],
  'y': [-1.339, -0.92, 1.676, -1.985]},
 {'lst': [-0.01],
  'n': 2,
  'x': [-1.268, -1.575, -0.077, 1.949],
  'y': [-1.339, -0.92, 1.676, -1.985]},
 {'lst': [0.68],
  'n': 2,
  'x': [1.556, -1.981, -0.593, 1.21],
  'y': [-1.241, -0.135, -0.268, -1.196]},
 {'lst': [0.42, 0.21],
  'n': 5,
  'x': [-1.843, -0.826, 1.812, -0.135, 0.554, -1.184, 1.447],
  'y': [0.494, -1.246, 0.467, 1.45, 1.447, 0.411, 1.652]}]


def test_property_write_lost_before_descriptor_set_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'eager', INPUTS)
    assert failure is None, str(failure)
