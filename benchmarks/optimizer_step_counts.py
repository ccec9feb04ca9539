"""Compiled optimizer steps, Strata beside torch.compile: graphs, graph ops and the largest
difference from eager after N steps (parameters and optimizer state).

Cases: SGD (momentum 0.9), Adam, AdamW; foreach and not; ``compile(opt.step)`` ("step") and a
compiled training step calling ``opt.zero_grad()``/``opt.step()`` ("train"); with and without a
StepLR scheduler changing the learning rate after every step. Backend: a counting eager
backend (``--backend`` names another, then graphs are not counted).

    python benchmarks/optimizer_step_counts.py --steps 12
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo

import compile_api

_OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda p, f: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=f),
    "adam": lambda p, f: torch.optim.Adam(p, lr=0.01, foreach=f),
    "adamw": lambda p, f: torch.optim.AdamW(p, lr=0.01, foreach=f),
}


class _Counter:
    def __init__(self) -> None:
        self.graphs = 0
        self.ops = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.graphs += 1
        self.ops += sum(1 for n in gm.graph.nodes if n.op.startswith("call_"))
        return gm.forward


def _make(kind: str, foreach: bool, sched: bool) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = _OPTIMIZERS[kind](model.parameters(), foreach)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if sched else None


def run_case(
    which: str, kind: str, foreach: bool, style: str, sched: bool, steps: int, backend: str
) -> str:
    if which == "torch":
        torch._dynamo.reset()
    else:
        compile_api.reset()
    compile_fn: Callable[..., Any] = torch.compile if which == "torch" else compile_api.compile
    counter = _Counter()
    model, opt, scheduler = _make(kind, foreach, sched)
    ref_model, ref_opt, ref_sched = _make(kind, foreach, sched)

    def train(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    target = opt.step if style == "step" else train
    compiled = compile_fn(target, backend=counter if backend == "count" else backend)
    x = torch.randn(8, 4)
    for _ in range(steps):
        if style == "step":
            opt.zero_grad()
            model(x).sum().backward()
            compiled()
        else:
            compiled(x)
        ref_opt.zero_grad()
        ref_model(x).sum().backward()
        ref_opt.step()
        for s in (scheduler, ref_sched):
            if s is not None:
                s.step()
    param_err = max(
        (p - q).abs().max().item()
        for p, q in zip(model.parameters(), ref_model.parameters(), strict=True)
    )
    mine = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    ref = [v for s in ref_opt.state.values() for v in s.values() if torch.is_tensor(v)]
    state_err = max(((a - b).abs().max().item() for a, b in zip(mine, ref, strict=True)), default=0)
    return (
        f"| {which} | {kind} | {foreach} | {style} | {sched} | {counter.graphs} | {counter.ops} "
        f"| {param_err:.2e} | {state_err:.2e} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--backend", default="count")
    args = parser.parse_args()
    columns = "compiler optimizer foreach style scheduler graphs ops param_err state_err".split()
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for kind, foreach, style, sched in itertools.product(
        _OPTIMIZERS, (False, True), ("step", "train"), (False, True)
    ):
        for which in ("strata", "torch"):
            print(
                run_case(which, kind, foreach, style, sched, args.steps, args.backend), flush=True
            )


if __name__ == "__main__":
    main()
