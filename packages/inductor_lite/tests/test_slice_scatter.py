"""slice_scatter lowered to a fused ``where`` (op_lowerings/indexing.py), not an aten call.

It reaches us from the backward of a slice (a rotary embedding's halves, a KV slice); every
case is compared with eager, forward and gradients.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inductor_lite.ir import FallbackNode

aten = torch.ops.aten


def _aten_calls(c: Any) -> set[str]:
    return {str(i.target) for i in c.items if isinstance(i, FallbackNode)}


@pytest.mark.parametrize(
    ("dim", "start", "end"),
    [(2, 0, 4), (2, 4, 9223372036854775807), (1, 1, 3), (-1, -3, None), (0, None, 1), (2, 0, 8)],
)
def test_slice_scatter_matches_eager_without_an_aten_call(
    dim: int, start: int | None, end: int | None, check: Any
) -> None:
    x = torch.randn(2, 3, 8)
    piece = torch.empty(2, 3, 8)[(slice(None),) * (dim % 3) + (slice(start, end),)]
    src = torch.randn(piece.shape)

    def fn(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x.sin(), src * 2, dim, start, end) + 1

    c = check(fn, [x, src])
    assert "aten.slice_scatter.default" not in _aten_calls(c)


def test_strided_slice_scatter_stays_an_aten_call_and_matches_eager(check: Any) -> None:
    def fn(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x, src, 1, 0, 8, 2) * 3

    c = check(fn, [torch.randn(4, 8), torch.randn(4, 4)])
    assert "aten.slice_scatter.default" in _aten_calls(c)


def test_rotary_halves_gradients_match_eager_with_no_slice_scatter_call(recorder: Any) -> None:
    import compile_api

    cos, sin = torch.randn(8, 16), torch.randn(8, 16)

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., :8], x[..., 8:]
        return torch.cat((-x2, x1), dim=-1)

    def fn(q: torch.Tensor) -> torch.Tensor:
        return ((q * cos + rotate_half(q) * sin) ** 2).sum()

    q = torch.randn(2, 4, 8, 16, requires_grad=True)
    q_ref = q.detach().clone().requires_grad_(True)
    compiled = compile_api.compile(fn, backend=recorder)
    for _ in range(2):
        q.grad = q_ref.grad = None
        compiled(q).backward()
        fn(q_ref).backward()
        torch.testing.assert_close(q.grad, q_ref.grad, atol=1e-4, rtol=1e-4)
    graphs = recorder.compiled()
    assert len(graphs) == 2  # forward and backward, both generated code
    assert all(g.eager_calls == 0 for g in graphs)
    assert not any("aten.slice_scatter.default" in _aten_calls(g) for g in graphs)
