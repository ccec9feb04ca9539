"""Op fuzz find (session 13, seed 4 program 778), open: on inductor_lite's Triton path (run
under Triton's interpreter here) ``x / -0.0`` has the sign of ``x / 0.0`` (-inf where eager
gives inf); the C++ path matches eager. The generated kernel says ``t0 / -0.0``; a hand-written
Triton kernel divides by ``-0.0`` (a constant, or a negated ``tl.full`` zero) the same wrong
way under the interpreter, so this is likely Triton's interpreter, not our code generator; not
checked on a GPU.
"""

# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.fuzz.op_runner import check_op_source

SOURCE = """\
import torch

SEED = 40007780
INPUTS = [((3, 5), 'float64', 'contig', 'normal')]
REQUIRES_GRAD = ()
CODEGEN = 'triton'


def fn(a0):
    return (torch.div(a0, -0.0),)
"""


@pytest.mark.xfail(strict=True, reason="Triton kernels divide by -0.0 as by 0.0")
def test_triton_division_by_negative_zero_matches_eager() -> None:
    failure = check_op_source(SOURCE, yardstick=False)
    assert failure is None, str(failure)
