"""Causes found by ``benchmarks/vision_sweep.py`` (timm/torchvision models outside the zoo),
each minimised to plain torch and compared with eager (and torch.compile's graph counts on the
torch the "like torch" tests were written against)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch._dynamo
import torch.utils.checkpoint
from torch import nn

import compile_api

from .conftest import TORCH_2_13, GraphCounter


def _checkpoint_seq(functions: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm's ``checkpoint_seq`` (``set_grad_checkpointing``): a Sequential's children, made a
    tuple unless already one, each run under activation checkpointing."""

    def run(j: int, mods: tuple[nn.Module, ...]):  # type: ignore[no-untyped-def]
        return lambda t: mods[j](t)

    children = functions.children() if isinstance(functions, nn.Sequential) else functions
    if not isinstance(children, (tuple, list)):
        children = tuple(children)
    for j in range(len(children)):
        x = torch.utils.checkpoint.checkpoint(run(j, children), x, use_reentrant=False)
    return x


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stages = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.GELU()), nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _checkpoint_seq(self.stages, x)


def _grads(m: nn.Module, out: torch.Tensor) -> list[torch.Tensor]:
    m.zero_grad(set_to_none=True)
    out.sum().backward()
    return [p.grad.clone() for p in m.parameters() if p.grad is not None]


def test_timm_checkpoint_seq_isinstance_of_module_children_compiles_whole(
    counter: GraphCounter,
) -> None:
    # isinstance(module.children(), (tuple, list)) broke the graph ("type() of iterator"):
    # every timm model with set_grad_checkpointing(True) had 5 graphs and 7 breaks.
    m, x = _Checkpointed(), torch.randn(2, 4)
    expected = m(x)
    expected_grads = _grads(m, expected)
    out = compile_api.compile(m, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(_grads(m, out), expected_grads, rtol=0, atol=0)
    assert counter.count == 1
    if TORCH_2_13:
        theirs = GraphCounter()
        torch._dynamo.reset()
        torch.compile(m, backend=theirs, fullgraph=True)(x)
        torch._dynamo.reset()
        assert theirs.count == counter.count


def _kinds(it: object) -> tuple[bool, ...]:
    from collections.abc import Iterable, Iterator, Sized

    return (
        isinstance(it, (tuple, list)), isinstance(it, Iterator), isinstance(it, Iterable),
        isinstance(it, Sized), isinstance(it, dict), isinstance(it, torch.Tensor),
    )  # fmt: skip


def _iterators(m: nn.Module, x: torch.Tensor) -> tuple[object, ...]:
    made = (
        m.children(), iter([x]), enumerate([x]), zip([x], [x]), map(abs, [x]), reversed([x]),
        (t for t in [x]), itertools.chain([x], [x]), iter({"a": x}.items()),
    )  # fmt: skip
    return tuple(_kinds(it) for it in made)


def test_isinstance_of_any_iterator_against_containers_and_abcs_like_eager(
    counter: GraphCounter,
) -> None:
    m, x = nn.Sequential(nn.Linear(2, 2)), torch.randn(2)
    fn = compile_api.compile(lambda t: (_iterators(m, t), t + 1), backend=counter, fullgraph=True)
    assert fn(x)[0] == _iterators(m, x)
    assert counter.count == 1


@pytest.mark.parametrize("cls", [enumerate, type(i for i in ()), itertools.chain])
def test_isinstance_of_an_iterator_against_its_own_class_runs_eagerly_and_right(
    cls: type,
) -> None:
    # The VM does not track which iterator class made the iterator: the answer differs between
    # candidates, so the statement runs eagerly (a break), never a guessed answer.
    def f(t: torch.Tensor) -> tuple[bool, torch.Tensor]:
        its = (enumerate([t]), (u for u in [t]), itertools.chain([t]))
        return tuple(isinstance(it, cls) for it in its), t + 1  # type: ignore[return-value]

    x = torch.randn(2)
    assert compile_api.compile(f, backend="eager")(x)[0] == f(x)[0]
