"""Dynamic shapes on the Triton path: symbols are plain int kernel arguments.

On CUDA tensors when a GPU is present, else on CPU tensors through Triton's interpreter
(TRITON_INTERPRET=1). Skipped when triton is not importable. Every test compiles through
compile_api with ``dynamic=True``, sweeps sizes against eager and asserts that one
generated graph ran for all of them.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F

# the interpreter must be chosen before triton is first imported (see test_triton.py)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"


# the interpreter runs a program per block in Python: sizes stay small except one sweep
SMALL = (2, 3, 17, 40, 5)


def test_pointwise_chain_one_kernel_every_size(triton_recorder: Any) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.relu(torch.sin(x) * 2 + x.cos()) - 0.5) * x

    triton_recorder.sweep(f, lambda n: (torch.randn(n, 5, device=DEV),), sizes=(2, 3, 17, 1000))
    assert triton_recorder.captures == 1
    triton_recorder.assert_generated_code_ran()
    (graph,) = triton_recorder.graphs
    assert graph.kernel_count == 1
    if DEV == "cuda":  # compiled Triton: the symbols are plain arguments, one kernel for all
        assert not re.search(r"s\d+: tl.constexpr", graph.kernel_source)


def test_layer_norm_softmax_symbolic_row_length(triton_recorder: Any) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(x, x.shape[-1:]), dim=-1)

    triton_recorder.sweep(f, lambda n: (torch.randn(3, 2 * n + 1, device=DEV),), sizes=SMALL)
    triton_recorder.assert_generated_code_ran()
    assert [g.kernel_count for g in triton_recorder.graphs] == [1]


def test_reductions_views_and_symint_scalar(triton_recorder: Any) -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return (x.t() * n).sum(1) + x.amax(1).mean() + x.var(0) + n

    # terms up to ~n * 4 summed over n + 2 of them: a few float32 ulps of ~100 apart with
    # another summation order (the block size the tuner picks)
    triton_recorder.sweep(
        f, lambda n: (torch.randn(n + 2, n, device=DEV), n), sizes=SMALL, atol=2e-4
    )
    triton_recorder.assert_generated_code_ran()


def test_transposed_input_static_and_symbolic_dims(triton_recorder: Any) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * w, -1)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, n + 1, device=DEV).t(), torch.randn(n, device=DEV)

    triton_recorder.sweep(f, make, sizes=SMALL)
    triton_recorder.assert_generated_code_ran()


def test_strided_slice_size_and_constant_gather_index(triton_recorder: Any) -> None:
    # x[:, ::2] has the size (n + 1) // 2: a floor division printed as Triton, not C++
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.zeros(x.shape[0], 1, dtype=torch.long, device=x.device)
        return x[:, ::2] + 1, torch.gather(x, 1, index)

    triton_recorder.sweep(f, lambda n: (torch.randn(n + 2, n, device=DEV).t(),), sizes=SMALL)
    triton_recorder.assert_generated_code_ran()


def test_slices_whose_sizes_are_min_or_max_of_a_symbol(triton_recorder: Any) -> None:
    # x[-3:] starts at max(0, n - 3) and has min(3, n) elements, a negative pad keeps
    # max(n - 2, 0): sympy Min/Max in Triton index and size expressions (no Triton for them
    # before: such graphs ran eagerly)
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x[:, -3:] + 1, x[:, 1:-2] * 2, F.pad(x, (-2, 3)).sin()

    triton_recorder.sweep(f, lambda n: (torch.randn(3, n, device=DEV),), sizes=(2, 5, 9, 4))
    triton_recorder.assert_generated_code_ran()
    source = "".join(g.kernel_source for g in triton_recorder.graphs)
    assert "max(0, " in source

