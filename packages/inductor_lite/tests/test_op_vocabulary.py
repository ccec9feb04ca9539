"""Every loop-IR op (``ir.Op``) is rendered by every backend, or listed there as missing, and
the ops lowerings build have a dtype their op's rule admits.

Each backend is a ``KernelBody`` subclass with an ``op_<name>`` method per pointwise op (or the
shared ``infix`` method for an op with an infix symbol). A backend lacking one fails when its
class is defined (so at import) and here. Reduction ops are rendered by each backend's
reduction setup. Each listed missing op is checked to be really missing, so the list shrinks
when a renderer is added.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from inductor_lite import cascade, cpp_expr, triton_codegen
from inductor_lite.errors import LoweringError
from inductor_lite.ir import (
    DtypeRule,
    Op,
    OpKind,
    PointwiseNode,
    ReductionNode,
    VConst,
    VOp,
    subexpressions,
)
from inductor_lite.kernel_body import KernelBody, renderer_name
from inductor_lite.scheduler import Step

BACKENDS: dict[str, Callable[[], KernelBody]] = {
    "cpp": lambda: cpp_expr.Body("", {}, {}),
    "triton": lambda: triton_codegen._Body("", {}, "m"),
}
# Triton has no case for these: a graph using them runs eagerly (README, "Missing").
TRITON_MISSING = {Op.POW, Op.FMOD, Op.ATAN2, Op.ATAN, Op.PROD}
POINTWISE = Op.of_kind(OpKind.POINTWISE)
REDUCTIONS = Op.of_kind(OpKind.REDUCTION)


def _reduction_text(backend: str, node: ReductionNode) -> str:
    """The accumulator's setup, update and final lines ``backend`` writes for ``node``."""
    if backend == "cpp":
        return " ".join(cascade.reduction_setup(node, "acc", "float"))
    body = triton_codegen._Body("", {}, "m")
    return " ".join(triton_codegen._reduction_lines(Step(node, 1), 6, body, "acc", "tl.float32"))


def _dtype(op: Op) -> torch.dtype:
    return {DtypeRule.INTEGER: torch.int32, DtypeRule.BOOL: torch.bool}.get(
        op.dtype_rule, torch.float32
    )


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("op", POINTWISE, ids=[o.value for o in POINTWISE])
def test_every_op_renders_on_every_backend_or_is_listed_missing(backend: str, op: Op) -> None:
    body = BACKENDS[backend]()
    missing = backend == "triton" and op in TRITON_MISSING
    assert (op in type(body).missing) == missing
    has_method = callable(getattr(body, renderer_name(op), None))
    assert has_method != (missing or op.infix != ""), "an infix op shares the infix method"
    v = VOp(op, tuple(VConst(1.0, torch.float32) for _ in range(op.arity)), _dtype(op))
    args = [f"a{k}" for k in range(op.arity)]
    if missing:
        with pytest.raises(LoweringError):
            body.op(v, args)
        return
    text = body.op(v, args)
    assert all(f"a{k}" in text for k in range(op.arity)), text


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("op", REDUCTIONS, ids=[o.value for o in REDUCTIONS])
def test_every_reduction_renders_on_every_backend_or_is_listed_missing(
    backend: str, op: Op
) -> None:
    node = ReductionNode("buf0", (4,), (6,), VConst(1.0, torch.float32), op, torch.float32)
    if backend == "triton" and op in TRITON_MISSING:
        with pytest.raises(LoweringError):
            _reduction_text(backend, node)
        return
    text = _reduction_text(backend, node)
    assert "acc" in text and "{v}" in text, text


def test_every_op_has_one_kind_and_a_reduction_node_takes_only_reductions() -> None:
    assert set(POINTWISE) | set(REDUCTIONS) == set(Op)
    assert not set(POINTWISE) & set(REDUCTIONS)
    assert {Op.SUM, Op.PROD, Op.MAX, Op.MIN} == set(REDUCTIONS)
    with pytest.raises(ValueError, match="maximum is not a reduction"):
        ReductionNode("buf0", (4,), (6,), VConst(1.0, torch.float32), Op.MAXIMUM, torch.float32)


def test_a_backend_without_a_method_for_an_op_fails_when_defined() -> None:
    with pytest.raises(TypeError, match="does not render: where"):

        class _NoWhere(cpp_expr.Body):
            missing = frozenset()
            op_where = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="lists as missing an op it renders: pow"):

        class _ListsPow(cpp_expr.Body):
            missing = frozenset({Op.POW})


def test_op_members_are_their_names_and_declare_arity_dtype_rule_and_infix() -> None:
    assert Op.ADD == "add" and Op("where") is Op.WHERE
    assert Op.WHERE.arity == 3 and Op.NEG.arity == 1 and Op.MUL.arity == 2
    assert Op.LT.to_bool and not Op.ADD.to_bool
    assert Op.EXP.dtype_rule is DtypeRule.FLOAT and Op.AND.dtype_rule is DtypeRule.INTEGER
    assert Op.ADD.infix == "+" and Op.MAXIMUM.infix == ""
    assert all(op.arity == 2 for op in Op if op.infix)


def _programs() -> list[tuple[str, Callable[..., Any], list[torch.Tensor]]]:
    f = torch.randn(4, 6)
    i = torch.randint(-5, 5, (4, 6), dtype=torch.int32)
    b = f > 0
    return [
        ("float math", lambda x: (x.exp() + x.sin() * x.sigmoid()).clamp(-1, 1).floor(), [f]),
        ("int math", lambda x: (x.abs() * 3 - x).relu().exp().sqrt() / 2, [i]),
        ("int bitwise", lambda x: (x & 3) | (~x ^ 1), [i]),
        ("compare and select", lambda x, y: torch.where(x > 0, x, -x).max() + (y == 1).sum(),
         [f, i]),
        ("logic", lambda m: torch.logical_and(m, ~m) | torch.logical_xor(m, m.logical_not()), [b]),
        ("reductions", lambda x: x.mean(1) + x.var(0).sum() + x.softmax(-1).amax(1), [f]),
        ("division", lambda x, y: torch.div(x, y, rounding_mode="floor") + x % 3.0, [f, f + 3]),
    ]


@pytest.mark.parametrize("name", [p[0] for p in _programs()])
def test_lowered_ops_have_a_dtype_their_rule_admits(name: str, check: Any) -> None:
    fn, inputs = next((p[1], p[2]) for p in _programs() if p[0] == name)
    compiled = check(fn, inputs)
    seen = 0
    for node in compiled.lowered.nodes:
        if isinstance(node, PointwiseNode | ReductionNode):
            for v in subexpressions(node.body, into_indices=True):
                if not isinstance(v, VOp):
                    continue
                seen += 1
                assert v.op.dtype_rule.admits(v.dtype), (v.op, v.dtype)
    assert seen > 0
