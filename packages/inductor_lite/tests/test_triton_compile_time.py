"""Compile time of the Triton path: repeated kernels are compiled and tuned once.

On CUDA tensors when a GPU is present, else through Triton's interpreter. Results are
compared with eager.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"

from inductor_lite import InductorConfig  # noqa: E402
from inductor_lite.triton_runtime import TritonLauncher  # noqa: E402


class Blocks(torch.nn.Module):
    """Four blocks of one shape with weights of their own: blocks 2-4 run the same kernel
    (the previous block's GELU fused into this block's layer norm)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.ModuleList(torch.nn.LayerNorm(48) for _ in range(4))
        self.fc = torch.nn.ModuleList(torch.nn.Linear(48, 48) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for ln, fc in zip(self.ln, self.fc, strict=True):
            x = F.gelu(fc(ln(x)))
        return x


def test_repeated_blocks_share_one_kernel_function_and_one_tuning(
    check: Any, config: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = dataclasses.replace(config, codegen="triton", triton_autotune_cache={})
    tuned: list[str] = []
    real = TritonLauncher._tune

    def counting(self: TritonLauncher, tensors: Any) -> Any:
        tuned.append(self.src.name)
        return real(self, tensors)

    monkeypatch.setattr(TritonLauncher, "_tune", counting)
    torch.manual_seed(0)
    model = Blocks().to(DEV)
    c = check(model, [torch.randn(10, 48, device=DEV)], config=cfg, atol=1e-5, rtol=1e-4)
    defs = c.kernel_source.count("@triton.jit")
    aliases = [line for line in c.kernel_source.splitlines() if " = kernel" in line]
    assert c.kernel_count == defs + len(aliases)
    assert len(aliases) == 2  # blocks 3 and 4 reuse block 2's kernel
    assert len(tuned) == defs  # one tuning per distinct kernel
    assert len(cfg.triton_autotune_cache) == defs


def test_pointwise_kernels_take_one_block_size_and_reductions_are_timed(
    check: Any, config: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each timed candidate is a Triton compile of its own: a kernel of pointwise steps only
    # gets one block size by rule; a row reduction's block sizes are still timed
    cfg = dataclasses.replace(config, codegen="triton", triton_autotune_cache={})
    timed: list[str] = []
    real = TritonLauncher._time

    def counting(self: TritonLauncher, blocks: Any, tensors: Any, cuda: bool) -> float:
        timed.append(self.src.name)
        return real(self, blocks, tensors, cuda)

    monkeypatch.setattr(TritonLauncher, "_time", counting)
    x, y = torch.randn(64, 48, device=DEV), torch.randn(64, 48, device=DEV)
    check(lambda a, b: torch.sigmoid(a * 2 + b) - b, [x, y], config=cfg, atol=1e-5, rtol=1e-5)
    assert timed == []
    rows = torch.randn(64, 1024, device=DEV)  # rows of 1,024: two block sizes worth timing
    check(lambda a: torch.softmax(a, -1), [rows], config=cfg, atol=1e-5, rtol=1e-5)
    assert len(timed) == 2


def test_pointwise_block_rule_fills_the_gpu_before_taking_larger_blocks() -> None:
    from inductor_lite.triton_codegen import block_candidates

    assert block_candidates(4096, 1024, True, pointwise=True) == [(1, 1024)]
    assert block_candidates(4096, 64, True, pointwise=True) == [(8, 64)]
    assert block_candidates(512, 64, True, pointwise=True) == [(2, 64)]  # 256 programs
    assert block_candidates(4 << 20, 1, False, pointwise=True) == [(1024, 1)]
    assert block_candidates(4096, 1, False, pointwise=True) == [(128, 1)]
    assert block_candidates(64, 10000, False, pointwise=True) == [(1, 4096)]


def test_reductions_time_at_most_two_block_candidates_around_a_thousand_elements() -> None:
    from inductor_lite.triton_codegen import block_candidates

    # persistent rows: XBLOCK rows of the padded row length, 1,024 to 2,048 elements a program
    assert block_candidates(4096, 1024, True) == [(1, 1024), (2, 1024)]
    assert block_candidates(8192, 768, True) == [(1, 1024), (2, 1024)]
    assert block_candidates(16384, 512, True) == [(2, 512), (4, 512)]
    assert block_candidates(65536, 128, True) == [(8, 128)]
    assert block_candidates(65536, 32, True) == [(8, 32)]  # short rows: the most a program takes
    assert block_candidates(1024, 2048, True) == [(1, 2048), (2, 2048)]
    assert block_candidates(1024, 4096, True) == [(1, 4096), (2, 4096)]
    # looped rows: the widest chunks
    assert block_candidates(2048, 8192, False) == [(1, 4096), (4, 512)]
    for rows, inner, persistent in ((4096, 1024, True), (64, 100, True), (10, 70000, False)):
        assert 1 <= len(block_candidates(rows, inner, persistent)) <= 2
