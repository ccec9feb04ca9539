"""A/B of conv_fold's cost model on real models (CPU, one thread, inference).

Each model's graph as torch.compile hands it to a backend (parameters as inputs) is compiled
twice by ``compile_fx`` on the inference route: ``new`` with conv_fold's fixed costs (the
post-op call, the guard), ``old`` with both set to 0 (every chain that saves traffic folds,
a ReLU always as oneDNN's post-op). Eager, old and new are timed interleaved, the order
rotated every round; median thread CPU time per call.

    python benchmarks/inductor_cpu_fold_ab.py tv_mobilenet_v3_small,tv_resnet18 [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inductor_cpu_models import build_with_inputs  # noqa: E402
from inductor_cpu_profile import _dynamo_graph  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--size", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from inductor_lite import compile_fx, conv_fold

    for name in args.models.split(","):
        torch.manual_seed(0)
        model, x = build_with_inputs(name, args.size)
        with torch.no_grad():
            gm, inputs = _dynamo_graph(model, *x)
            new = compile_fx(gm, inputs)
            saved = conv_fold._POST_OP_CALL_ELEMENTS, conv_fold._GUARD_CALL_ELEMENTS
            conv_fold._POST_OP_CALL_ELEMENTS = conv_fold._GUARD_CALL_ELEMENTS = 0
            try:
                old = compile_fx(gm, inputs)
            finally:
                conv_fold._POST_OP_CALL_ELEMENTS, conv_fold._GUARD_CALL_ELEMENTS = saved
            ref = model(*x)
            for fn in (old, new):
                torch.testing.assert_close(fn(*inputs)[0], ref, rtol=1e-3, atol=1e-4)
            fns = {
                "eager": lambda: model(*x),
                "old": lambda: old(*inputs),
                "new": lambda: new(*inputs),
            }
            times: dict[str, list[float]] = {k: [] for k in fns}
            for _ in range(3):
                for f in fns.values():
                    f()
            for i in range(args.reps):
                order = list(fns.items())
                for k, f in order[i % 3 :] + order[: i % 3]:
                    t = time.thread_time()
                    f()
                    times[k].append(time.thread_time() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{name:24s} "
            + " ".join(f"{k} {v:.2f} ms ({med['eager'] / v:.2f}x)" for k, v in med.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
