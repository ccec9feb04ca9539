"""Depthwise convolution blocks of mobile nets on CPU: eager vs inductor_lite vs torch inductor.

Each case is ``act(bn(conv(x)))`` with ``groups == channels`` (eval mode, batch 1), at the
shapes mobilenet_v3_small / efficientnet_b0 run at 96x96 input. Each block is compiled by
``compile_fx`` (inference route) and by ``torch.compile`` (inductor), checked against eager,
and timed interleaved: median over ``--reps`` samples of ``--calls`` calls, this process's CPU
time, one thread.

    python benchmarks/inductor_cpu_depthwise.py [--reps 15] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn

from inductor_lite import InductorConfig, compile_fx

# (channels, height = width, kernel, stride, activation)
CASES: list[tuple[int, int, int, int, str]] = [
    (16, 48, 3, 2, "relu"),
    (72, 24, 3, 2, "relu"),
    (88, 12, 3, 1, "relu"),
    (96, 12, 5, 2, "hardswish"),
    (240, 6, 5, 1, "hardswish"),
    (576, 3, 5, 1, "hardswish"),
    (32, 48, 3, 1, "silu"),
    (144, 24, 3, 2, "silu"),
    (480, 6, 3, 1, "silu"),
]
_ACT = {"relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU}


def block(c: int, k: int, stride: int, act: str) -> nn.Module:
    conv = nn.Conv2d(c, c, k, stride=stride, padding=k // 2, groups=c, bias=False)
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return nn.Sequential(conv, bn, _ACT[act]()).eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = InductorConfig(num_threads=1, fallback="raise")
    print(f"torch {torch.__version__}, 1 thread, batch 1, median of {args.reps} x {args.calls}")
    print(f"{'channels hw k s act':24s} {'eager us':>9s} {'ours us':>9s} {'torch us':>9s}"
          f" {'ours x':>7s} {'torch x':>7s}")
    for c, hw, k, stride, act in CASES:
        torch.compiler.reset()  # every case shares Sequential.forward: no recompile limit
        model = block(c, k, stride, act)
        x = torch.randn(1, c, hw, hw)
        with torch.no_grad():
            gm = torch.fx.symbolic_trace(model)
            impls: dict[str, Any] = {
                "eager": model,
                "ours": compile_fx(gm, [x], config=config),
                "torch": torch.compile(model, backend="inductor"),
            }
            ref = model(x)
            for f in impls.values():
                torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-4)
                f(x)
            times: dict[str, list[float]] = {name: [] for name in impls}
            for _ in range(args.reps):
                for name, f in impls.items():
                    t = time.process_time()
                    for _ in range(args.calls):
                        f(x)
                    times[name].append((time.process_time() - t) / args.calls)
        med = {name: statistics.median(v) * 1e6 for name, v in times.items()}
        label = f"{c} {hw}x{hw} {k}x{k} s{stride} {act}"
        print(
            f"{label:24s} {med['eager']:9.1f} {med['ours']:9.1f} {med['torch']:9.1f}"
            f" {med['eager'] / med['ours']:6.2f}x {med['eager'] / med['torch']:6.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
