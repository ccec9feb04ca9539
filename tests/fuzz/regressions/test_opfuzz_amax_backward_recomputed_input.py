"""Op fuzz find (session 13): NaN gradients from ``amax`` backward on inductor_lite.

``v0 = sin(a0) * a1; v0.amax(0)`` with a backward: the forward stores ``v0`` from one kernel and
recomputes it inside the ``amax`` reduction of another; with glibc's vector ``sinf`` in one loop
and the scalar one in the other, the two differ by an ulp, so ``eq(v0, amax)`` (amax's backward
mask) finds no maximum in a column, divides by a count of 0 and gives NaN gradients
(``vector_libm=False`` gives eager's). torch.compile gives eager's gradients. Fixed: a graph
output's other readers read its store (graph_lowering._maybe_realize).
"""

# ruff: noqa: E501
from __future__ import annotations

from tests.fuzz.op_runner import check_op_source

SOURCE = """\
import torch

SEED = 3
INPUTS = [((4, 5), 'float32', 'contig', 'normal'), ((5,), 'float32', 'strided', 'special')]
REQUIRES_GRAD = (0,)
CODEGEN = 'cpp'


def fn(a0, a1):
    v0 = torch.sin(a0) * a1
    return (v0.amax(0),)
"""


def test_amax_backward_recomputed_input_compiled_matches_eager() -> None:
    failure = check_op_source(SOURCE)
    assert failure is None, str(failure)
