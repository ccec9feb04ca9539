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

import copy
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
    compile_fn: Callable[..., Any],
    kind: str,
    foreach: bool,
    style: str,
    scheduler: bool,
    steps: int = 4,
) -> int:
    """Run compiled steps beside eager ones; check they agree; return the graph count."""
    counter = GraphCounter()
    run, ref = _Run(kind, foreach, scheduler), _Run(kind, foreach, scheduler)
    compiled = compile_fn(run.opt.step if style == "step" else run.train_step, backend=counter)
    x = torch.randn(8, 4)
    for _ in range(steps):
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
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_scheduler_changing_lr_recompiles_once_as_torch(
    kind: str, foreach: bool, style: str
) -> None:
    """The scheduler wraps ``opt.step`` (its state init once ran on fake tensors: KeyError on
    the next step). A float lr that changes becomes a SymFloat input at the first recompile,
    as torch.compile makes it (before: one graph per lr value, then eager at the cache limit).
    """
    graphs = _steps(compile_api.compile, kind, foreach, style, scheduler=True, steps=10)
    assert graphs == {"step": 2, "train": 3}[style]
    if TORCH_2_13:
        assert graphs <= _steps(torch.compile, kind, foreach, style, scheduler=True, steps=10)


# What the parameter update compiles to: the step's own ops are in a graph (before, the loop
# over ``opt.state[p]`` broke the graph and ran eagerly, the foreach update with it).
_UPDATE_OPS = {"sgd": ("add_",), "adam": ("addcdiv_",), "adamw": ("addcdiv_",)}


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_the_update_and_the_state_reads_are_traced_into_one_graph(kind: str, foreach: bool) -> None:
    counter = GraphCounter()
    run, ref = _Run(kind, foreach, False), _Run(kind, foreach, False)
    compiled = compile_api.compile(run.opt.step, backend=counter)
    explained = None
    x = torch.randn(8, 4)
    for i in range(3):
        run.backward(x)
        if i == 2:
            explained = compile_api.explain(run.opt.step)()
        else:
            compiled()
        ref.backward(x)
        ref.opt.step()
    for p, q in zip(run.model.parameters(), ref.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert any(op in gm.code for gm in counter.graphs for op in _UPDATE_OPS[kind])
    # torch's _use_grad calls torch._dynamo.graph_break() around the step: that one break only
    assert explained is not None and explained.graph_break_count <= 1
    # the trace reads the groups as capturable (as torch.compile's does); the real ones stay
    assert all(g.get("capturable") is not True for g in run.opt.param_groups)


def test_a_parameter_whose_grad_goes_none_recompiles_and_is_skipped_like_eager() -> None:
    counter = GraphCounter()
    run, ref = _Run("adam", True, False), _Run("adam", True, False)
    compiled = compile_api.compile(run.opt.step, backend=counter)
    x = torch.randn(8, 4)
    for i in range(4):
        for r in (run, ref):
            r.backward(x)
            if i >= 2:
                r.model[0].bias.grad = None
        compiled()
        ref.opt.step()
        for p, q in zip(run.model.parameters(), ref.model.parameters(), strict=True):
            torch.testing.assert_close(p, q)
    assert counter.count == 2


@pytest.mark.parametrize("foreach", [False, True])
def test_parameters_of_one_shape_get_inputs_of_their_own(foreach: bool) -> None:
    """Two layers of one shape: their states' graph inputs were named alike (InternalError:
    duplicate argument in the graph's code)."""
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)) for _ in "ab"]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.Adam(m.parameters(), lr=0.01, foreach=foreach) for m in models]
    compiled = compile_api.compile(opts[0].step, backend=GraphCounter())
    x = torch.randn(8, 4)
    for _ in range(3):
        for m, o in zip(models, opts, strict=True):
            o.zero_grad()
            m(x).square().sum().backward()
        compiled()
        opts[1].step()
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_loaded_optimizer_state_is_read_at_call_time() -> None:
    """The state tensors are graph inputs read from ``opt.state[p][name]`` on each call: a
    ``load_state_dict`` (new tensors) is what the next compiled step updates."""
    run, ref = _Run("adam", False, False), _Run("adam", False, False)
    compiled = compile_api.compile(run.opt.step, backend=GraphCounter())
    x = torch.randn(8, 4)
    for i in range(4):
        run.backward(x)
        compiled()
        ref.backward(x)
        ref.opt.step()
        if i == 1:
            saved = ref.opt.state_dict()
            run.opt.load_state_dict(copy.deepcopy(saved))  # new tensors, not ref's own
            ref.opt.load_state_dict(copy.deepcopy(saved))
    for a, b in zip(run.state_tensors(), ref.state_tensors(), strict=True):
        torch.testing.assert_close(a, b)
    for p, q in zip(run.model.parameters(), ref.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_tensor_lr_under_a_scheduler_compiles_once_as_torch(kind: str) -> None:
    """torch's advice against a recompile per learning rate: ``lr=torch.tensor(...)`` (the
    scheduler then fills it in place). One graph over 6 lr values, as torch.compile (SGD: two,
    its momentum buffers are made by the first step)."""

    def count(compile_fn: Callable[..., Any]) -> int:
        counter = GraphCounter()
        made = []
        for _ in range(2):
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 3)
            opt = OPTIMIZERS[kind](model.parameters(), False)
            for group in opt.param_groups:
                group["lr"] = torch.tensor(group["lr"])
            made.append((model, opt, torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)))
        (model, opt, sched), (ref_model, ref_opt, ref_sched) = made
        compiled = compile_fn(opt.step, backend=counter)
        x = torch.randn(8, 4)
        for _ in range(6):
            for m, o in ((model, opt), (ref_model, ref_opt)):
                o.zero_grad()
                m(x).square().sum().backward()
            compiled()
            ref_opt.step()
            sched.step()
            ref_sched.step()
            for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
                torch.testing.assert_close(p, q)
        return counter.count

    graphs = count(compile_api.compile)
    assert graphs == (2 if kind == "sgd" else 1)
    if TORCH_2_13:
        assert graphs == count(torch.compile)
