"""Sums contiguous along their outputs (a channels-last pool, a sum over rows) are computed
column-wise -- the reduction loop outside, the outputs vectorised inside -- with eager's
results: several blocks of outputs, chunks of one dim or of the outermost of two, double.
(A squeeze-excitation block's pool, one block without chunks: test_squeeze_excitation.py.)"""

from __future__ import annotations

from typing import Any

import torch


def test_row_sums_over_many_rows_and_blocks_match_eager(check: Any) -> None:
    # 1000 outputs: two blocks of OUT_BLOCK; 65 rows: a chunk of ROW_CHUNK and a partial one
    # (under 65536 elements: larger column sums stay aten calls)
    x = torch.randn(65, 1000)
    compiled = check(lambda t: (t * 2).sum(0), [x], atol=1e-4, rtol=1e-5)
    assert "column-wise" in compiled.kernel_source


def test_double_column_sum_matches_eager(check: Any) -> None:
    x = torch.randn(1, 24, 16, 16, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last
    )
    compiled = check(lambda t: (t + 1).sum((2, 3)), [x])
    assert "column-wise" in compiled.kernel_source


def test_column_pool_error_against_float64_is_small(check: Any) -> None:
    # 48x48 terms per channel, all positive: chunks keep the float error near eager's
    x = (torch.rand(1, 16, 48, 48) + 1).contiguous(memory_format=torch.channels_last)
    compiled = check(lambda t: t.mean((2, 3)), [x])
    exact = x.double().mean((2, 3))
    ours = (compiled(x).double() - exact).abs().max().item()
    eager = (x.mean((2, 3)).double() - exact).abs().max().item()
    assert ours <= max(4 * eager, 1e-6)


def _column_kernels(graph: Any) -> list[int]:
    """The number of column sums in each kernel of ``graph`` that starts with one."""
    from inductor_lite.column_sum import column_steps
    from inductor_lite.scheduler import Kernel

    return [len(column_steps(k)) for k in graph.items if isinstance(k, Kernel) and column_steps(k)]


def test_backward_column_sums_share_a_kernel_and_gradients_match_eager(recorder: Any) -> None:
    # a transformer block's backward: the layer norm's weight and bias gradients and the
    # linear's bias gradient are three sums over the rows; one kernel computes them
    import compile_api

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    ref.load_state_dict(block.state_dict())
    x = torch.randn(2, 8, 32)
    compiled = compile_api.compile(lambda x: (block(x) ** 2).sum(), backend=recorder)
    for _ in range(2):
        block.zero_grad()
        ref.zero_grad()
        compiled(x).backward()
        (ref(x) ** 2).sum().backward()
        for p, q in zip(block.parameters(), ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    backward = recorder.compiled()[-1]
    assert max(_column_kernels(backward), default=0) >= 2, backward.kernel_source
