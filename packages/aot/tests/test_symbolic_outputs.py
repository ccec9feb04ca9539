"""Graphs whose outputs include symbolic numbers (SymInt / SymFloat / SymBool example values).

compile_api with dynamic=True makes int arguments and tensor sizes symbolic, so captured graphs
return things like `n + 1` or `x.shape[0] * 1.5`. aot's forward graph returns those values; at
runtime they come back as plain Python numbers, with no gradient. Every result is checked
against eager over a sweep of ints and sizes, forward and backward.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch

import aot
import compile_api


@pytest.fixture(autouse=True)
def _strict_compile_api() -> Iterator[None]:
    """Backend failures must raise here: an eager fallback would hide an aot refusal."""
    old = compile_api.config.suppress_errors
    compile_api.config.suppress_errors = False
    compile_api.reset()
    yield
    compile_api.config.suppress_errors = old
    compile_api.reset()


class _AotBackend:
    """A compile_api backend running aot_module_simplified; remembers what it compiled."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.runs: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Any:
        self.graphs.append(gm)
        run = aot.aot_module_simplified(gm, example_inputs, aot.eager_compiler)
        self.runs.append(run)
        return run


def _check_same(got: Any, want: Any) -> None:
    assert type(got) is type(want), (got, want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _check_same(g, w)
    else:
        assert got == want


def test_reproducer_int_argument_output_n_plus_1_end_to_end_with_aot_eager() -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return x * n, n + 1

    cf = compile_api.compile(f, backend="aot_eager", dynamic=True)
    for n in (4, 5, 7, 11, -3):
        x = torch.randn(3)
        got = cf(x, n)
        _check_same(got, f(x, n))
        assert type(got[1]) is int


@pytest.mark.parametrize("requires_grad", [False, True])
def test_int_argument_outputs_match_eager_forward_and_backward_over_a_sweep(
    requires_grad: bool,
) -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int, int, bool]:
        return (x * n).sin(), n + 1, n * n - 2, n > 5

    backend = _AotBackend()
    cf = compile_api.compile(f, backend=backend, dynamic=True)
    for n, size in [(4, 3), (5, 3), (9, 6), (2, 8), (13, 2)]:
        x0 = torch.randn(size)
        xe = x0.clone().requires_grad_(requires_grad)
        xc = x0.clone().requires_grad_(requires_grad)
        want, got = f(xe, n), cf(xc, n)
        _check_same(got[1:], want[1:])
        torch.testing.assert_close(got[0], want[0])
        if requires_grad:
            want[0].sum().backward()
            got[0].sum().backward()
            torch.testing.assert_close(xc.grad, xe.grad)
    assert backend.graphs, "the backend never ran"
    # The symbolic outputs are computed by the forward graph, not passed through as constants.
    fn = backend.runs[-1].aot_function
    kinds = {info.kind for art in fn.cache.values() for info in art.meta.outputs}
    assert aot.analysis.OutputKind.SYMBOLIC in kinds


@pytest.mark.parametrize("requires_grad", [False, True])
def test_size_derived_outputs_int_float_and_bool_match_eager_over_sizes(
    requires_grad: bool,
) -> None:
    def g(x: torch.Tensor) -> tuple[torch.Tensor, int, float, bool]:
        y = x.cos() * x.shape[1]
        return y, x.shape[0] + x.shape[1], x.size(0) * 1.5, x.shape[0] == x.shape[1]

    backend = _AotBackend()
    cg = compile_api.compile(g, backend=backend, dynamic=True)
    for shape in [(3, 4), (4, 4), (7, 2), (5, 9)]:
        x0 = torch.randn(shape)
        xe = x0.clone().requires_grad_(requires_grad)
        xc = x0.clone().requires_grad_(requires_grad)
        want, got = g(xe), cg(xc)
        _check_same(got[1:], want[1:])
        torch.testing.assert_close(got[0], want[0])
        if requires_grad:
            (want[0] * torch.arange(want[0].numel()).view_as(want[0])).sum().backward()
            (got[0] * torch.arange(got[0].numel()).view_as(got[0])).sum().backward()
            torch.testing.assert_close(xc.grad, xe.grad)
    assert backend.graphs


def test_aot_function_on_a_captured_dynamic_graph_returns_plain_ints_and_grads() -> None:
    captured: list[tuple[torch.fx.GraphModule, list[object]]] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> Any:
        captured.append((gm, list(example_inputs)))
        return gm

    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return x.exp() * n, n * 3

    compile_api.compile(f, backend=capture, dynamic=True)(torch.randn(4), 2)
    assert captured
    gm, examples = captured[-1]
    run = aot.aot_module_simplified(gm, examples, aot.eager_compiler)
    # The graph takes the captured graph's flat inputs; find where the int and the tensor go.
    for n, size in [(2, 4), (6, 4), (3, 10)]:
        x0 = torch.randn(size)
        flat = [x0.clone().requires_grad_(True) if isinstance(e, torch.Tensor) else n
                if isinstance(e, torch.SymInt | int) else e for e in examples]
        ref = [x0.clone().requires_grad_(True) if isinstance(e, torch.Tensor) else n
               if isinstance(e, torch.SymInt | int) else e for e in examples]
        got = list(run(*flat))
        want = list(gm(*ref))
        assert [type(g) for g in got] == [type(w) for w in want]
        assert any(type(g) is int for g in got)
        for g, w in zip(got, want, strict=True):
            if isinstance(w, torch.Tensor):
                torch.testing.assert_close(g, w)
            else:
                assert g == w
        tg = [g for g in got if isinstance(g, torch.Tensor)]
        tw = [w for w in want if isinstance(w, torch.Tensor)]
        torch.autograd.backward([t.sum() for t in tg])
        torch.autograd.backward([t.sum() for t in tw])
        for a, b in zip(flat, ref, strict=True):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a.grad, b.grad)


def test_symbolic_output_alongside_output_view_and_input_mutation() -> None:
    def h(x: torch.Tensor, buf: torch.Tensor, n: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        buf.add_(n)
        y = x * 2
        return y[1:], n - x.shape[0], buf.sum()

    backend = _AotBackend()
    ch = compile_api.compile(h, backend=backend, dynamic=True)
    for n, size in [(3, 5), (8, 5), (1, 7)]:
        x0 = torch.randn(size)
        be, bc = torch.zeros(size), torch.zeros(size)
        xe, xc = x0.clone().requires_grad_(True), x0.clone().requires_grad_(True)
        want, got = h(xe, be, n), ch(xc, bc, n)
        _check_same(got[1], want[1])
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[2], want[2])
        torch.testing.assert_close(bc, be)
        want[0].sum().backward()
        got[0].sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)


def test_graph_before_a_data_dependent_branch_compiles_despite_capture_unbacked_symbols() -> None:
    # Capturing `bool(t)` allocates an unbacked symbol in the shared ShapeEnv before the graph
    # breaks; aot used to fail its trace with PendingUnbackedSymbolNotFound on that leftover.
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        y = x * n
        if bool(y.sum() > 0):
            return y + 1, n + 2
        return y - 1, n - 2

    backend = _AotBackend()
    cf = compile_api.compile(f, backend=backend, dynamic=True)
    for n, size in [(2, 3), (-3, 4), (5, 6), (-1, 6), (4, 2)]:
        x0 = torch.randn(size)
        xe, xc = x0.clone().requires_grad_(True), x0.clone().requires_grad_(True)
        want, got = f(xe, n), cf(xc, n)
        _check_same(got[1], want[1])
        torch.testing.assert_close(got[0], want[0])
        want[0].sum().backward()
        got[0].sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)
    # The graph ending at the branch (it returns the tensor and the comparison) went through aot.
    assert any("gt" in gm.code for gm in backend.graphs)
