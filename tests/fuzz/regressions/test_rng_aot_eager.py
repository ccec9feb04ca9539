"""Fuzz reproducer: program seed 2026000243, backend aot_eager (shrunk).

Fixed: aot's partition dropped the unused rand_like from the forward graph, so dropout drew
from an earlier generator state (torch.compile 2.13's aot_eager drops it too).

Found as: call 0: value: result[1]: values [-0.23719586431980133, -0.12319611012935638] vs [-0.10268931090831757, 0.046198949217796326]
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.runner import check_source

SOURCE = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)
NET = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 2))

def extra_args(call, x, y, n):
    wf0_1 = 1.0
    return (wf0_1,)

def fn(x, y, n, lst, wf0_1):
    tf1_3 = torch.rand_like(x)
    tf1_4 = NET(torch.stack([x.sum(), y.sum(), x.mean()]))
    tf0_2 = x
    return (y, tf1_4, tf0_2, wf0_1)
"""

INPUTS = [{'lst': [0.48], 'n': 0, 'x': [1.874, -1.4, -1.503], 'y': [0.744, 0.931, -1.148]},
 {'lst': [0.48], 'n': 0, 'x': [1.874, -1.4, -1.503], 'y': [0.744, 0.931, -1.148]},
 {'lst': [-0.17], 'n': 0, 'x': [-1.991, -1.737, -0.067], 'y': [-1.134, 0.145, -1.147]},
 {'lst': [0.13, 0.37, -0.57],
  'n': 2,
  'x': [0.92, 1.279, -1.11, 0.596, -0.662],
  'y': [0.037, -1.137, -1.573, -0.136, 0.737]}]


def test_rng_aot_eager_compiled_matches_eager() -> None:
    failure = check_source(SOURCE, 'aot_eager', INPUTS)
    assert failure is None, str(failure)
