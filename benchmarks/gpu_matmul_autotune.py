"""Matmul + epilogue on the GPU: eager vs torch.compile vs Strata, default and max-autotune.

    python benchmarks/gpu_matmul_autotune.py --out results/matmul_autotune.json [--cases a,b]
        [--budget-s 170]

Each case is an inference call (``torch.no_grad``) of a small module: a linear layer and the
pointwise ops after it (GELU, a residual add), in float16, bfloat16 and float32, at the MLP
size 4096x4096x4096, a decode-like 8x4096x4096 and a bias + residual case. For each it runs,
side by side in one process:

- eager;
- ``torch.compile`` in the default mode and with ``mode="max-autotune"``;
- ``compile_api.compile`` (Strata) in the default mode, ``"max-autotune"`` and
  ``"max-autotune-no-cudagraphs"`` (the template choice without CUDA graphs).

It prints and writes (``--out``, JSON, rewritten after every case so a timeout keeps what
finished) the median wall time per call (CUDA events around back-to-back calls, launch
overhead included), each compiler's time over eager, the first call's seconds (compile), the
largest difference from eager, and what Strata chose for each matmul (the
``strata.kernel_choices`` log lines: "Triton template 128x128x64/w8/s4" or "aten (cuBLAS)",
with the timings behind it). Strata's choices are cached in its kernel cache directory: run
with a fresh ``STRATA_CACHE_DIR`` to include the measurement in the compile time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bandwidth import wall_seconds as batched_seconds  # noqa: E402


class LinearAct(torch.nn.Module):
    """``act(x @ w.T + b)`` (+ a residual when given)."""

    def __init__(self, k: int, n: int, act: str) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(k, n)
        self.act = act

    def forward(self, x: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        y = self.lin(x)
        if self.act == "gelu":
            y = F.gelu(y)
        elif self.act == "relu":
            y = torch.relu(y)
        return y if r is None else y + r


# name -> (M, K, N, dtype, activation, residual)
CASES: dict[str, tuple[int, int, int, torch.dtype, str, bool]] = {
    "mlp_gelu_4096_fp16": (4096, 4096, 4096, torch.float16, "gelu", False),
    "mlp_gelu_4096_bf16": (4096, 4096, 4096, torch.bfloat16, "gelu", False),
    "mlp_gelu_4096_fp32": (4096, 4096, 4096, torch.float32, "gelu", False),
    "skinny_gelu_8x4096_fp16": (8, 4096, 4096, torch.float16, "gelu", False),
    "bias_residual_8192x1024x4096_fp16": (8192, 1024, 4096, torch.float16, "none", True),
}
TOL = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 2e-3}


def wall_seconds(fn: Callable[[], Any]) -> float:
    """Median over 5 batches of back-to-back calls (CUDA events), per call; each batch lasts
    about 20 ms."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    est = max((time.perf_counter() - t0) / 5, 1e-6)
    return batched_seconds(fn, int(min(2000, max(10, 0.02 / est))))


class ChoiceLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_variant(
    name: str,
    make: Callable[[], Callable[..., Any]],
    args: tuple[Any, ...],
    expected: torch.Tensor,
    tol: float,
) -> dict[str, Any]:
    choices = ChoiceLog()
    log = logging.getLogger("strata.kernel_choices")
    log.addHandler(choices)
    log.setLevel(logging.DEBUG)
    row: dict[str, Any] = {"variant": name}
    try:
        with torch.no_grad():
            fn = make()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*args)
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 2)
            for _ in range(3):  # CUDA graphs record on a later call
                out = fn(*args)
            out = out.clone()
            err = (out.float() - expected.float()).abs().max().item()
            row["max_abs_err"] = err
            row["correct"] = bool(torch.allclose(out.float(), expected.float(), atol=tol, rtol=tol))
            row["median_s"] = wall_seconds(lambda: fn(*args))
    except Exception as exc:  # a variant that fails is reported, the others still run
        row["error"] = f"{type(exc).__name__}: {str(exc).strip()}"[:400]
    finally:
        log.removeHandler(choices)
    if choices.lines:
        row["strata_choices"] = [ln for ln in choices.lines if "mm" in ln]
    return row


def run_case(case: str) -> dict[str, Any]:
    import compile_api

    m, k, n, dtype, act, residual = CASES[case]
    torch.manual_seed(0)
    model = LinearAct(k, n, act).to("cuda", dtype).eval()
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    args: tuple[Any, ...] = (x, torch.randn(m, n, device="cuda", dtype=dtype)) if residual else (x,)
    with torch.no_grad():
        expected = model(*args)
    tol = TOL[dtype]

    def torch_compiled(mode: str | None) -> Callable[[], Callable[..., Any]]:
        def make() -> Callable[..., Any]:
            torch._dynamo.reset()
            return torch.compile(model, mode=mode)

        return make

    def strata(mode: str | None) -> Callable[[], Callable[..., Any]]:
        def make() -> Callable[..., Any]:
            compile_api.reset()
            return compile_api.compile(model, mode=mode)

        return make

    variants: list[tuple[str, Callable[[], Callable[..., Any]]]] = [
        ("eager", lambda: model),
        ("torch_default", torch_compiled(None)),
        ("torch_max_autotune", torch_compiled("max-autotune")),
        ("strata_default", strata(None)),
        ("strata_max_autotune", strata("max-autotune")),
        ("strata_max_autotune_no_cudagraphs", strata("max-autotune-no-cudagraphs")),
    ]
    rows = []
    for name, make in variants:
        row = run_variant(name, make, args, expected, tol)
        rows.append(row)
        print(f"  {case} {name}: {json.dumps(row)}", flush=True)
    eager = rows[0].get("median_s")
    for row in rows:
        if eager and row.get("median_s"):
            row["speedup_over_eager"] = round(eager / row["median_s"], 3)
    by = {r["variant"]: r for r in rows}

    def ratio(a: str, b: str) -> float | None:
        ta, tb = by[a].get("median_s"), by[b].get("median_s")
        return round(tb / ta, 3) if ta and tb else None

    return {
        "case": case,
        "shape_mkn": [m, k, n],
        "dtype": str(dtype).removeprefix("torch."),
        "activation": act,
        "residual": residual,
        "rows": rows,
        # > 1: Strata faster than torch.compile in the same mode
        "strata_vs_torch_default": ratio("strata_default", "torch_default"),
        "strata_vs_torch_max_autotune": ratio("strata_max_autotune", "torch_max_autotune"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=170.0,
        help="start no new case after this many seconds (the run stays under 4 minutes)",
    )
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    import triton

    cases = [c for c in opts.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        sys.exit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "tf32": torch.backends.cuda.matmul.allow_tf32,
        "cases": [],
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for case in cases:
        elapsed = time.perf_counter() - start
        print(f"{case} ({elapsed:.0f} s)", flush=True)
        if elapsed > opts.budget_s:
            report["cases"].append({"case": case, "skipped": f"time budget {opts.budget_s} s"})
            continue
        report["cases"].append(run_case(case))
        report["total_s"] = round(time.perf_counter() - start, 1)
        opts.out.write_text(json.dumps(report, indent=1))
    print()
    head = f"{'case':36} {'variant':36} {'median us':>10} {'x eager':>8} {'1st s':>6}  ok"
    print(head)
    for c in report["cases"]:
        if "skipped" in c:
            print(f"{c['case']:36} skipped ({c['skipped']})")
        for r in c.get("rows", []):
            us = r.get("median_s")
            print(
                f"{c['case']:36} {r['variant']:36} {us * 1e6 if us else float('nan'):10.1f} "
                f"{r.get('speedup_over_eager', float('nan')):8.2f} "
                f"{r.get('first_call_s', float('nan')):6.1f}  "
                f"{r.get('correct', r.get('error', '?').splitlines()[0][:60])}"
            )
            for line in r.get("strata_choices", []):
                print(f"{'':74}{line}")
    print(f"\nwritten {opts.out} in {report['total_s']} s")


if __name__ == "__main__":
    main()
