"""constant_pad_nd lowered to a fused ``where`` (op_lowerings/indexing.py), not an aten call:
the causal-LM loss's ``pad(labels, (0, 1), value=-100)``. Every case is compared with eager,
values and gradients, negative pads (crops) included.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inductor_lite.ir import FallbackNode


def _aten_calls(c: Any) -> set[str]:
    return {str(i.target) for i in c.items if isinstance(i, FallbackNode)}


@pytest.mark.parametrize(
    ("shape", "dtype", "pad", "value"),
    [
        ((2, 8), torch.int64, (0, 1), -100),
        ((3, 5, 7), torch.float32, (2, 1, 1, 3), 0.5),
        ((3, 5, 7), torch.float32, (-2, 1, 0, -3), 0.0),
        ((4, 6), torch.bfloat16, (-1, -2), 1.0),
        ((2, 3, 4, 5), torch.float32, (1, 1, 1, 1, 1, 1), 2.0),
        ((5,), torch.bool, (3, 2), True),
    ],
)
def test_constant_pad_matches_eager_without_an_aten_call(
    shape: tuple[int, ...], dtype: torch.dtype, pad: tuple[int, ...], value: float, check: Any
) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, pad, value=value).to(torch.float32) * 2

    c = check(fn, [(torch.randn(shape) * 10).to(dtype)])
    assert "aten.constant_pad_nd.default" not in _aten_calls(c)


def test_padded_gradients_match_eager(recorder: Any) -> None:
    import compile_api

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (F.pad(x, (1, 2, -1, 0), value=3.0).exp() * 0.5).sum()

    x = torch.randn(2, 5, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    compile_api.compile(fn, backend=recorder)(x).backward()
    fn(x_ref).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    graphs = recorder.compiled()
    assert not any("aten.constant_pad_nd.default" in _aten_calls(g) for g in graphs)
