"""Block sizes of pointwise Triton kernels: the rule against timing every candidate (GPU).

    python benchmarks/pointwise_blocks.py [--workloads pointwise,transformer_block,gpt4]

Each inference workload is captured once and compiled (compile_fx, Triton) once per policy,
with a fresh autotune cache each time:
  - ``timed``: every pointwise kernel times the block-size candidates reductions get (the
    behaviour before block sizes of pointwise kernels were chosen by rule);
  - ``rule``: ``triton_codegen.block_candidates``'s single choice (the default);
  - ``rule-4k``: the same rule aiming at 4096 elements a program instead of 1024.
Prints the median call time (``triton.testing.do_bench``, CUDA events) of each policy, side by
side in one process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from saved_for_backward import capture  # noqa: E402
from workloads import BY_NAME  # noqa: E402

from inductor_lite import InductorConfig, compile_fx, triton_codegen, triton_runtime  # noqa: E402

Blocks = list[tuple[int, int]]


def _rule_4k(rows: int, max_inner: int, persistent: bool, pointwise: bool = False) -> Blocks:
    if not pointwise or max_inner <= 1 or not persistent:
        return triton_codegen.block_candidates(rows, max_inner, persistent, pointwise)
    full = 1 << max(0, (max_inner - 1).bit_length())
    x = 1
    for c in (2, 4, 8):
        if c * full <= 4096 and rows >= c * 256:
            x = c
    return [(x, full)]


def _timed(rows: int, max_inner: int, persistent: bool, pointwise: bool = False) -> Blocks:
    return triton_codegen.block_candidates(rows, max_inner, persistent, False)


POLICIES: dict[str, Callable[..., Blocks]] = {
    "timed": _timed,
    "rule": triton_codegen.block_candidates,
    "rule-4k": _rule_4k,
}


def main() -> None:
    from triton.testing import do_bench  # type: ignore[attr-defined]

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="pointwise,transformer_block,gpt4")
    p.add_argument("--device", default="cuda", help="cpu: a smoke run under TRITON_INTERPRET=1")
    p.add_argument("--quick", action="store_true")
    opts = p.parse_args()
    dev = torch.device(opts.device)
    for name in opts.workloads.split(","):
        inst = BY_NAME[name].build(dev, opts.quick)
        with torch.no_grad():
            gm, inputs = capture(inst.fn, inst.args)
            line = [name]
            for policy, fn in POLICIES.items():
                triton_runtime.block_candidates = fn  # type: ignore[assignment]
                cfg = InductorConfig(codegen="triton", triton_autotune_cache={}, use_aot=False)
                compiled: Any = compile_fx(gm, list(inputs), config=cfg)
                compiled(*inputs)
                if dev.type == "cuda":
                    ms = do_bench(lambda c=compiled: c(*inputs), warmup=25, rep=200)
                else:
                    t0 = time.perf_counter()
                    compiled(*inputs)
                    ms = (time.perf_counter() - t0) * 1e3
                chosen = sorted(set(cfg.triton_autotune_cache.values()))
                line.append(f"{policy} {ms * 1e3:.1f} us {chosen}")
            triton_runtime.block_candidates = triton_codegen.block_candidates
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
