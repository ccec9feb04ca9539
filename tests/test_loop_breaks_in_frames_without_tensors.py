"""A break inside a loop of a frame with nothing of its own to compile runs the frame eagerly.

transformers installs its output-capturing hooks (``output_hidden_states=True``) with a
recursive walk over the module tree: a loop over the children calling itself, then a loop over
the capture tasks calling ``register_forward_hook`` (a break: torch.compile and Strata both stop
at ``RemovableHandle``). torch.compile gives up a frame with a break in a loop (it and its
recursive calls run eagerly). Strata runs a loop with a break as bytecode and compiles the code
around it; for a frame that holds no tensor and has put no op in its graph that only made the
code after the first loop a resume function that broke again at every call that installs a
hook: 13 broken frames on a tiny Llama with every output, torch 11. Such a frame now runs
eagerly (and is not compiled again), as torch's does; a loop in a frame with tensors still
runs as a region between compiled graphs. Results and hook effects equal eager's; the break
counts equal torch.compile 2.13's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api
from benchmarks.zoo.measure import counting_torch_breaks
from compile_api.state import state

from .conftest import TORCH_2_13, GraphCounter


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    compile_api.reset()
    torch._dynamo.reset()
    yield
    compile_api.reset()
    torch._dynamo.reset()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    return torch.nn.Sequential(block, torch.nn.Sequential(torch.nn.Linear(4, 4)), torch.nn.Tanh())


def install(module: torch.nn.Module, name: str, tasks: list[tuple[str, type]], seen: Any) -> None:
    for child_name, child in module.named_children():
        install(child, f"{name}.{child_name}", tasks, seen)
    for key, cls in tasks:
        if isinstance(module, cls):
            module.register_forward_hook(lambda m, i, o, key=key: seen.append((key, o.sum())))


def hooked_forward(model: torch.nn.Module, x: torch.Tensor, seen: list[Any]) -> Any:
    if not getattr(model, "_hooked", False):
        install(model, "", [("linear", torch.nn.Linear), ("relu", torch.nn.ReLU)], seen)
        model._hooked = True
    return model(x) * 2


def _run(compile_fn: Any) -> tuple[list[Any], int]:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    model, seen = _model(), []
    counter = GraphCounter()
    fn = hooked_forward if compile_fn is None else compile_fn(hooked_forward, backend=counter)
    results = [fn(model, x, seen), fn(model, x + 1, seen)]
    return [*results, *(t for _, t in seen), [k for k, _ in seen]], counter.count


def test_recursive_hook_installation_breaks_as_often_as_torch_and_matches_eager() -> None:
    want, _ = _run(None)
    got, graphs = _run(compile_api.compile)
    assert got[-1] == want[-1]  # the hooks ran, in eager's order
    torch.testing.assert_close(got[:-1], want[:-1])
    ours = [b for r in state.records for b in r.breaks]
    install_code = install.__code__
    assert any(r.code is install_code and r.ran_eagerly for r in state.records)
    assert not any(
        r.code.co_name.startswith("__resume")
        and r.code.co_firstlineno == install_code.co_firstlineno
        for r in state.records
    )
    if TORCH_2_13:
        with counting_torch_breaks() as theirs:
            got_torch, torch_graphs = _run(torch.compile)
        torch.testing.assert_close(got_torch[:-1], want[:-1])
        assert len(ours) == len(theirs)
        assert graphs == torch_graphs


def loop_between_tensor_code(x: torch.Tensor, names: list[str]) -> torch.Tensor:
    y = x.cos()
    for name in names:
        print("step", name)
    return y.sin() + 1


def tensors_after_a_loop_at_the_start(x: torch.Tensor, names: list[str]) -> torch.Tensor:
    for name in names:
        print("step", name)
    return x.sin() + 1


@pytest.mark.parametrize("fn", [loop_between_tensor_code, tensors_after_a_loop_at_the_start])
def test_a_loop_in_a_frame_with_tensors_still_runs_between_compiled_graphs(
    fn: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(3)
    counter = GraphCounter()
    torch.testing.assert_close(
        compile_api.compile(fn, backend=counter)(x, ["a", "b"]), fn(x, ["a", "b"])
    )
    assert counter.count == (2 if fn is loop_between_tensor_code else 1)
    assert not any(r.ran_eagerly for r in state.records)
