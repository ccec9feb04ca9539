"""The C++ wrapper with and without kept buffers (kept_buffers.py), side by side.

One model (``inductor_cpu_models.MODELS``), traced with ``torch.fx.symbolic_trace`` and compiled
by ``compile_fx`` for inference twice: default ``InductorConfig`` and ``kept_buffer_bytes=0``
(every intermediate allocated per call, as before). Eager and both are timed interleaved with
the process CPU clock at one thread; medians. Both results are checked against eager.

    python benchmarks/inductor_cpu_kept_ab.py tv_mobilenet_v3_small [--reps 30] [--size 96]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.fx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inductor_cpu_models import MODELS, build_with_inputs, first_tensor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from inductor_lite import InductorConfig, compile_fx

    torch.manual_seed(0)
    model, x = build_with_inputs(args.model, args.size)
    configs = {"kept": InductorConfig(), "allocating": InductorConfig(kept_buffer_bytes=0)}
    with torch.no_grad():
        ref = first_tensor(model(*x))
        fns = {"eager": model}
        for name, cfg in configs.items():
            gm = torch.fx.symbolic_trace(copy.deepcopy(model))
            fns[name] = compile_fx(gm, list(x), config=cfg)
            out = first_tensor(fns[name](*x))
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            print(f"{name}: max rel err {err:.1e}")
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.reps):
            for name, fn in fns.items():
                t0 = time.process_time()
                fn(*x)
                times[name].append(time.process_time() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("  ".join(f"{k} {v:.3f} ms" for k, v in med.items()))
    print(f"speedup over eager: kept {med['eager'] / med['kept']:.2f}x, "
          f"allocating {med['eager'] / med['allocating']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
