"""Training batch norm on a float16/bfloat16 input with float32 weight, bias and running stats.

Eager's CPU kernel runs this "mixed type" case with float32 saved statistics; torch's
decomposition rounds them to the input's dtype, which cost the weight gradient ~5e-4 of
relative accuracy. inductor_lite's decomposition keeps them in float32: the gradients must
match eager's and float64's (computed on the same rounded input) to float32 accuracy.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from inductor_lite import InductorConfig, compile_fx
from inductor_lite.tracing import extra_decompositions

aten = torch.ops.aten

# float32 sums over 256 values per channel, relative to the largest gradient: a few roundoffs
# of float32 each; the float16-rounded statistics err by ~1e-4 and more (measured 4.6e-4 on
# this test's float16 inputs before the fix)
GRAD_RTOL = 256 * float(torch.finfo(torch.float32).eps)


def _bn(
    x: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor, w: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1)


def _run(
    fn: Any,
    x: torch.Tensor,
    g: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """Output and gradients of input, weight and bias; everything in ``dtype`` when given."""

    def cv(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone() if dtype is None else t.detach().to(dtype)

    xs, ws, bs = cv(x).requires_grad_(), cv(w).requires_grad_(), cv(b).requires_grad_()
    out = fn(xs, cv(torch.zeros(w.shape)), cv(torch.ones(w.shape)), ws, bs)
    out.backward(cv(g))
    assert xs.grad is not None and ws.grad is not None and bs.grad is not None
    return [out.detach(), xs.grad, ws.grad, bs.grad]


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mixed_batch_norm_gradients_match_eager_and_float64(
    dtype: torch.dtype, config: InductorConfig
) -> None:
    torch.manual_seed(0)
    x = (torch.randn(16, 4, 4, 4) * 2 + 3).to(dtype)  # a mean away from 0
    g = torch.randn(16, 4, 4, 4).to(dtype)
    w, b = torch.rand(4) + 0.5, torch.randn(4)

    def backend(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        return compile_fx(gm, inputs, config=config)

    torch.compiler.reset()
    got = _run(torch.compile(_bn, backend=backend, dynamic=False), x, g, w, b)
    torch.compiler.reset()
    eager = _run(_bn, x, g, w, b)
    exact = _run(_bn, x, g, w, b, torch.float64)
    half_eps = float(torch.finfo(dtype).eps)
    # output and input gradient are stored in the reduced dtype: one rounding of it
    for k in (0, 1):
        assert got[k].dtype == dtype
        assert _rel(got[k], exact[k]) <= 2 * half_eps, (k, _rel(got[k], exact[k]))
    # weight and bias gradients are float32 sums of float32 products
    for k in (2, 3):
        assert got[k].dtype == torch.float32
        assert _rel(got[k], eager[k]) <= GRAD_RTOL, (k, _rel(got[k], eager[k]))
        assert _rel(got[k], exact[k]) <= GRAD_RTOL, (k, _rel(got[k], exact[k]))


@pytest.mark.parametrize(
    ("op", "args"),
    [
        (aten.native_batch_norm.default, ("rm", "rv", True, 0.1, 1e-5)),
        (aten._native_batch_norm_legit_functional.default, ("rm", "rv", True, 0.1, 1e-5)),
        (aten._native_batch_norm_legit.default, ("rm", "rv", True, 0.1, 1e-5)),
        (aten._native_batch_norm_legit.no_stats, (True, 0.1, 1e-5)),
    ],
    ids=["native", "legit_functional", "legit", "legit_no_stats"],
)
@pytest.mark.parametrize("params", ["float32", "float16", "none"])
def test_decomposition_saves_statistics_in_eagers_dtype(
    op: Any, args: tuple[Any, ...], params: str
) -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 3, 5).half()
    pdtype = torch.float16 if params == "float16" else torch.float32
    wb: tuple[Any, ...] = (
        (None, None) if params == "none" else (torch.rand(3).to(pdtype), torch.randn(3).to(pdtype))
    )

    def call(fn: Any) -> list[torch.Tensor]:
        stats = {"rm": torch.zeros(3, dtype=pdtype), "rv": torch.ones(3, dtype=pdtype)}
        return list(fn(x, *wb, *(stats.get(a, a) if isinstance(a, str) else a for a in args)))

    # output, saved mean, saved inverse std (the new running stats of the functional variant
    # come out float32 for float16 stats: torch's decomposition, untouched here)
    want = call(op)[:3]
    got = call(extra_decompositions()[op])[:3]
    assert [t.dtype for t in got] == [t.dtype for t in want]
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, atol=2e-3, rtol=2e-3)
