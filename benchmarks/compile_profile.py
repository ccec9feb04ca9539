"""Where compile time goes: the first call of a workload under cProfile.

    python benchmarks/compile_profile.py gpt4 transformer_block_train --device cuda --out DIR

Writes ``DIR/<workload>.txt`` (the 40 functions with the most cumulative and own time) and
prints the first call's wall time. Strata's default backend; a fresh process per run gives
cold caches only if the caches (Triton's ``~/.triton``, ours) are cleared first.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from workloads import BY_NAME, TRAINING  # type: ignore[import-not-found]

    p = argparse.ArgumentParser()
    p.add_argument("workloads", nargs="+")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default=".")
    p.add_argument("--compile-threads", type=int, default=None,
                   help="InductorConfig.triton_compile_threads (1: candidates compiled one by one)")
    opts = p.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    import compile_api

    for name in opts.workloads:
        w = BY_NAME[name]
        inst = w.build(torch.device(opts.device), False)
        options = (
            None if opts.compile_threads is None
            else {"triton_compile_threads": opts.compile_threads}
        )
        fn = compile_api.compile(inst.fn, options=options)
        mode = torch.enable_grad() if w.kind == TRAINING else torch.no_grad()
        prof = cProfile.Profile()
        with mode:
            t0 = time.perf_counter()
            prof.enable()
            fn(*inst.args)
            if opts.device == "cuda":
                torch.cuda.synchronize()
            prof.disable()
            first = time.perf_counter() - t0
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(40)
        report = f"first call {first:.2f} s\n" + buf.getvalue()
        (out / f"{name}-t{opts.compile_threads}.txt").write_text(report)
        print(f"{name} (compile threads {opts.compile_threads}): first call {first:.2f} s",
              flush=True)


if __name__ == "__main__":
    main()
