"""Every loop-IR op (``ir.Op``) is rendered by every backend, or listed here as missing there.

A new ``Op`` member without a C++ or Triton case fails this test (before, a missing renderer
showed only when a graph using it compiled, as an eager fallback). Each missing entry is
checked to be really missing, so the list shrinks when a renderer is added.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from inductor_lite import cpp_expr, cpp_prelude, triton_codegen
from inductor_lite.errors import LoweringError
from inductor_lite.ir import Op, VConst, VOp

# Triton has no case for these: a graph using them runs eagerly (README, "Missing").
TRITON_MISSING = {Op.POW, Op.FMOD, Op.ATAN2, Op.ATAN}


def _dtype(op: Op) -> torch.dtype:
    if op in (Op.AND, Op.OR, Op.XOR, Op.BITWISE_NOT):
        return torch.int32
    return torch.bool if op.to_bool else torch.float32


def _render(backend: str, op: Op) -> str:
    dtype = _dtype(op)
    v = VOp(op, tuple(VConst(1.0, torch.float32) for _ in range(op.arity)), dtype)
    args = [f"a{k}" for k in range(op.arity)]
    if backend == "cpp":
        ct = cpp_prelude.compute_type(dtype)
        return cpp_expr.Body._op(cast(Any, None), v, args, ct)
    return triton_codegen._Body._op(v, args, "tl.float32")


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("op", list(Op), ids=[o.value for o in Op])
def test_every_op_renders_on_every_backend_or_is_listed_missing(backend: str, op: Op) -> None:
    missing = backend == "triton" and op in TRITON_MISSING
    if missing:
        with pytest.raises(LoweringError):
            _render(backend, op)
        return
    text = _render(backend, op)
    assert all(f"a{k}" in text for k in range(op.arity)), text


def test_op_members_are_their_names_and_know_their_arity() -> None:
    assert Op.ADD == "add" and Op("where") is Op.WHERE
    assert Op.WHERE.arity == 3 and Op.NEG.arity == 1 and Op.MUL.arity == 2
    assert Op.LT.to_bool and not Op.ADD.to_bool
