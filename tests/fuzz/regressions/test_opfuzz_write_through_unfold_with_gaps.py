"""Op fuzz find (session 13, seed 0 program 0), fixed in aot: an in-place write through an ``unfold``
view whose windows leave gaps (step > size) zeroes the elements between the windows.

Functionalization replays the write onto the base with ``unfold_backward`` (PyTorch's inverse
of the unfold view), which scatters the windows into zeros instead of into the base. aot's graph
(aot_eager too, and torch.compile 2.13's aot_eager and inductor) returns zeros where eager keeps
the input's values. aot now traces such an unfold as the equal ``as_strided`` view, whose
inverse (``as_strided_scatter``) writes into the base.
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.op_runner import check_op_source

SOURCE = """\
import torch

SEED = 0
INPUTS = [((), 'float32', 'offset', 'normal'), ((3, 5, 2), 'float32', 'contig', 'normal')]
REQUIRES_GRAD = ()
CODEGEN = 'cpp'


def fn(a0, a1):
    v1 = a1.unfold(0, 1, 2)
    v1.sub_(a0, alpha=2)
    v2 = a1.unfold(-1, 1, 1)
    return (a1 * 1, v2.sum(-1), a1.unfold(1, 2, 2).exp())
"""


GRAD_SOURCE = """\
import torch

SEED = 1
INPUTS = [((3, 8), 'float32', 'contig', 'normal')]
REQUIRES_GRAD = (0,)
CODEGEN = 'cpp'


def fn(a0):
    return (a0.unfold(1, 2, 3).sin(), a0.unfold(0, 2, 1) * 2)
"""


def test_write_through_unfold_with_gaps_compiled_matches_eager() -> None:
    failure = check_op_source(SOURCE, yardstick=False)
    assert failure is None, str(failure)


def test_gradient_through_unfold_with_gaps_matches_eager() -> None:
    failure = check_op_source(GRAD_SOURCE, yardstick=False)
    assert failure is None, str(failure)
