"""The per-call signature check: a generated check finds the graphs of a recent signature, and
agrees with the signature's key (it may be stricter, never looser)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aot
from aot.signature import leaf_key, signature_check


def _counting() -> tuple[list[torch.fx.GraphModule], Any]:
    graphs: list[torch.fx.GraphModule] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm

    return graphs, compiler


def _f(x: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    return (x * w).sin() * k


def _variants() -> list[tuple[str, tuple[object, ...]]]:
    x, w = torch.randn(4, 6), torch.randn(4, 6)
    return [
        ("base", (x, w, 2)),
        ("transposed", (torch.randn(6, 4).t(), w, 2)),
        ("other shape", (torch.randn(3, 6), torch.randn(3, 6), 2)),
        ("double", (x.double(), w.double(), 2)),
        ("requires grad", (x.clone().requires_grad_(), w, 2)),
        ("parameter", (x, torch.nn.Parameter(w.clone(), requires_grad=False), 2)),
        ("other int", (x, w, 3)),
        ("float instead of int", (x, w, 2.0)),
        ("expanded", (torch.randn(6).expand(4, 6), w, 2)),
    ]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_generated_check_agrees_with_the_signature_key(dynamic: bool, grad: bool) -> None:
    variants = _variants()
    for name, base in variants:
        check = signature_check(base, dynamic, grad)
        key = leaf_key
        for other_name, args in variants:
            for mode in (False, True):
                with torch.set_grad_enabled(mode):
                    same = mode == grad and [key(a, dynamic) for a in args] == [
                        key(a, dynamic) for a in base
                    ]
                    stricter = same and any(
                        type(a) is not type(b) for a, b in zip(args, base, strict=True)
                    )
                    assert check(args) == (same and not stricter), (name, other_name, mode)


def test_recent_signatures_run_their_own_graphs_like_eager() -> None:
    graphs, compiler = _counting()
    compiled = aot.aot_function(_f, compiler)
    calls = [args for _, args in _variants() if not any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)]
    for _ in range(2):  # the second round finds every signature compiled
        for args in calls:
            with torch.no_grad():
                torch.testing.assert_close(compiled(*args), _f(*args))  # type: ignore[arg-type]
    # a Parameter without grad has the key of a tensor: no graph of its own
    assert len(graphs) == len(calls) - 1


def test_alternating_grad_modes_each_keep_their_graph() -> None:
    graphs, compiler = _counting()
    compiled = aot.aot_function(_f, compiler)
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)
    for _ in range(3):
        out = compiled(x, w, 2)
        out.sum().backward()
        expected_grad = (x * w.detach()).cos() * x * 2
        assert w.grad is not None
        torch.testing.assert_close(w.grad, expected_grad)
        w.grad = None
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, w, 2), _f(x, w, 2))
    assert len(graphs) == 3  # forward + backward, inference


def test_only_static_forward_graphs_are_called_prechecked() -> None:
    calls: list[str] = []

    class Compiled:
        def __init__(self, gm: torch.fx.GraphModule) -> None:
            self.gm = gm

        def __call__(self, *args: Any) -> Any:
            calls.append("call")
            return self.gm(*args)

        def call_prechecked(self, *args: Any) -> Any:
            calls.append("prechecked")
            return self.gm(*args)

    compiled = aot.aot_function(_f, lambda gm, inputs: Compiled(gm))
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)
    compiled(x, w, 2).sum().backward()
    assert calls == ["prechecked", "call"]  # forward, then the backward
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w, 2), _f(x, w, 2))
    assert calls[2:] == ["prechecked"]
