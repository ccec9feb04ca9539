"""Compiling the optimizer step, as torch.compile users write it: ``compile(opt.step)`` and a
compiled training step that calls ``opt.zero_grad()``/``opt.step()``, with an LR scheduler
stepping between calls. Parameters and optimizer state equal eager's after several steps, and
graphs number as torch.compile 2.13's on the same program (the reference; other torch releases
check against eager only).

Before: every Python function under ``torch.optim`` was taken for a graph op and run on fake
tensors while tracing, so the optimizer's lazy state init wrote FakeTensors into the real
``opt.state`` (the next eager step raised ``KeyError: 'exp_avg'``), and frames of torch.optim's
files were never compiled (``compile(opt.step)`` gave 0 graphs; torch: 1 or 2)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import TORCH_2_13, GraphCounter

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=0.01, foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=0.01, foreach=foreach),
}


@pytest.fixture(autouse=True)
def torch_fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class _Run:
    """A model, its optimizer and (optionally) a StepLR scheduler, from one seed."""

    def __init__(self, kind: str, foreach: bool, scheduler: bool) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)
        )
        self.opt = OPTIMIZERS[kind](self.model.parameters(), foreach)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 1, gamma=0.5) if scheduler else None

    def train_step(self, x: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad()
        loss = self.model(x).square().sum()
        loss.backward()
        self.opt.step()
        return loss

    def backward(self, x: torch.Tensor) -> None:
        self.opt.zero_grad()
        self.model(x).square().sum().backward()

    def state_tensors(self) -> list[torch.Tensor]:
        return [v for s in self.opt.state.values() for v in s.values() if torch.is_tensor(v)]


def _steps(
    compile_fn: Callable[..., Any], kind: str, foreach: bool, style: str, scheduler: bool
) -> int:
    """Run 4 compiled steps beside 4 eager ones; check they agree; return the graph count."""
    counter = GraphCounter()
    run, ref = _Run(kind, foreach, scheduler), _Run(kind, foreach, scheduler)
    compiled = compile_fn(run.opt.step if style == "step" else run.train_step, backend=counter)
    x = torch.randn(8, 4)
    for _ in range(4):
        if style == "step":
            run.backward(x)
            compiled()
            ref.backward(x)
            ref.opt.step()
        else:
            torch.testing.assert_close(compiled(x), ref.train_step(x))
        for r in (run, ref):
            if r.sched is not None:
                r.sched.step()
        for p, q in zip(run.model.parameters(), ref.model.parameters(), strict=True):
            torch.testing.assert_close(p, q)
        state, ref_state = run.state_tensors(), ref.state_tensors()
        assert len(state) == len(ref_state)
        for a, b in zip(state, ref_state, strict=True):
            assert not isinstance(a, torch._subclasses.FakeTensor)
            torch.testing.assert_close(a, b)
    return counter.count


@pytest.mark.parametrize("style", ["step", "train"])
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_compiled_optimizer_step_matches_eager_and_torch_graph_count(
    kind: str, foreach: bool, style: str
) -> None:
    graphs = _steps(compile_api.compile, kind, foreach, style, scheduler=False)
    assert graphs >= 1
    if TORCH_2_13:
        torch_graphs = _steps(torch.compile, kind, foreach, style, scheduler=False)
        assert graphs <= torch_graphs


@pytest.mark.parametrize("style", ["step", "train"])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_compiled_optimizer_step_with_a_scheduler_keeps_real_state(kind: str, style: str) -> None:
    """The scheduler wraps ``opt.step``; its state init ran on fake tensors (KeyError next step)."""
    assert _steps(compile_api.compile, kind, False, style, scheduler=True) >= 1
