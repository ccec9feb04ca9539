"""Op fuzz finds (session 13, seed 1 programs 28, 79, 180): an aten call that inductor_lite's
wrapper runs with a NaN or infinite float argument (``fill_(-inf)`` on an input written back,
``fill_(nan)`` on a view of one) was written as ``nan``/``inf``, names the wrapper then refused
as unbound size symbols ("size symbol nan is not the size of an input"): the graph fell back to
eager. Fixed in wrapper._arg_expr (``float('nan')``)."""

# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.fuzz.op_runner import check_op_source

SOURCES = [
    """\
import torch

SEED = 10000790
INPUTS = [((), 'float16', 'contig', 'normal'), ((8,), 'float32', 'contig', 'normal')]
REQUIRES_GRAD = ()
CODEGEN = 'cpp'


def fn(a0, a1):
    a0.fill_(-float('inf'))
    return (a1 * 2,)
""",
    """\
import torch

SEED = 10000280
INPUTS = [((5,), 'bfloat16', 'contig', 'normal'), ((3, 4), 'float32', 'strided', 'special')]
REQUIRES_GRAD = ()
CODEGEN = 'cpp'


def fn(a0, a1):
    a0[1:].fill_(float('nan'))
    v0 = torch.clamp(a1, min=float('nan'))
    v1 = a1.masked_fill(a1 > 0, float('inf'))
    return (a0, v0, v1)
""",
]


@pytest.mark.parametrize("index", range(len(SOURCES)))
def test_nonfinite_float_arguments_compile(index: int) -> None:
    failure = check_op_source(SOURCES[index])
    assert failure is None, str(failure)
