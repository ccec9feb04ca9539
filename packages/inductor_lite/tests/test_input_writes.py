"""Graph inputs written in place: aot's final copy_(input, value) becomes the kernel's store.

Every case runs the compiled graph and eager on equal inputs and compares the updated inputs
and the outputs; the wrapper source says whether a kernel stored into the input or the new
value was copied in at the end.
"""

from __future__ import annotations

import dataclasses
import operator
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

import aot
from inductor_lite import CompiledGraph, InductorConfig, compile_aten_graph, compile_fx

LR = 0.1


class Graphs:
    """An aot compiler (keeping input mutations in the graph) that keeps what it compiled."""

    def __init__(self, config: InductorConfig) -> None:
        self.config = config
        self.compiled: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        c = compile_aten_graph(gm, example_inputs, config=self.config)
        self.compiled.append(c)
        return c

    def only(self) -> CompiledGraph:
        (c,) = self.compiled
        assert isinstance(c, CompiledGraph)
        return c


def _compiled(fn: Callable[..., Any], config: InductorConfig) -> tuple[Any, Graphs]:
    graphs = Graphs(config)
    return aot.aot_function(fn, graphs, keep_input_mutations=True), graphs


def _sgd(p: torch.Tensor, g: torch.Tensor, b: torch.Tensor, gb: torch.Tensor) -> None:
    with torch.no_grad():
        p.sub_(LR * g)
        b.sub_(LR * gb)


def _leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*s, requires_grad=True) for s in shapes]


def _twins(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def test_sgd_update_is_one_pass_storing_into_the_parameters(config: InductorConfig) -> None:
    compiled, graphs = _compiled(_sgd, config)
    p, b = _leaves((64, 48), (48,))
    g, gb = torch.randn(64, 48), torch.randn(48)
    p_e, b_e = _twins([p, b])
    ptrs, versions = (p.data_ptr(), b.data_ptr()), (p._version, b._version)
    for step in range(3):
        compiled(p, g, b, gb)
        _sgd(p_e, g, b_e, gb)
        torch.testing.assert_close(p, p_e, msg=lambda m, s=step: f"weight, step {s}: {m}")
        torch.testing.assert_close(b, b_e, msg=lambda m, s=step: f"bias, step {s}: {m}")
    c = graphs.only()
    assert "into the input" in c.wrapper_source and ".copy_(" not in c.wrapper_source
    assert c.fallback_count == 0
    assert "_empty(" not in c.wrapper_source  # nothing allocated: p and b are the outputs
    # the same memory, versions bumped once per step as eager's sub_, still leaves
    assert (p.data_ptr(), b.data_ptr()) == ptrs
    assert (p._version - versions[0], b._version - versions[1]) == (3, 3)
    assert p_e._version - versions[0] == 3
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    assert torch.is_grad_enabled()


def test_torch_level_optimizer_step_compiles_through_compile_fx(config: InductorConfig) -> None:
    # the graph a capture layer records for `with torch.no_grad(): p.sub_(0.5 * g)`, which
    # used to run as it came (one warning); now it compiles
    graph = torch.fx.Graph()
    p_in, g_in = graph.placeholder("p"), graph.placeholder("g")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    update = graph.call_function(operator.mul, (0.5, g_in))
    graph.call_method("sub_", (p_in, update))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output(graph.call_method("detach", (g_in,)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    p, g = torch.randn(40, requires_grad=True), torch.randn(40)
    graphs = Graphs(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = aot.aot_module_simplified(gm, [p, g], graphs, keep_input_mutations=True)
        direct = compile_fx(gm, [p, g], config=config)  # the backend itself, same route
    for fn in (c, direct):
        want = p.detach() - 0.5 * g
        got = fn(p, g)
        torch.testing.assert_close(p.detach(), want)
        torch.testing.assert_close(got, g)
        assert p.is_leaf and p.grad_fn is None and torch.is_grad_enabled()
    assert "into the input" in graphs.only().wrapper_source


def test_an_input_read_after_its_new_value_is_computed_is_copied_at_the_end(
    config: InductorConfig,
) -> None:
    def fn(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        old = p.clone()
        p.add_(g)
        return old * 2  # reads p's old value after the update in program order

    compiled, graphs = _compiled(fn, config)
    p, g = torch.randn(8, 16), torch.randn(8, 16)
    p_e = p.clone()
    got = compiled(p, g)
    want = fn(p_e, g)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(p, p_e)
    assert ".copy_(" in graphs.only().wrapper_source


def test_an_update_reading_its_input_at_other_positions_is_copied_at_the_end(
    config: InductorConfig,
) -> None:
    def fn(x: torch.Tensor) -> None:
        x.copy_(x.t() * 2 + x)  # element (i, j) needs the old (j, i)

    compiled, graphs = _compiled(fn, config)
    x = torch.randn(33, 33)
    x_e = x.clone()
    compiled(x)
    fn(x_e)
    torch.testing.assert_close(x, x_e)
    assert ".copy_(" in graphs.only().wrapper_source


def test_momentum_buffer_and_parameter_are_both_stored_in_place(config: InductorConfig) -> None:
    # one kernel: the parameter's step reads the old buffer, then the buffer's step stores
    # the new one at the same elements
    def fn(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor) -> None:
        with torch.no_grad():
            buf.mul_(0.9).add_(g)
            p.sub_(LR * buf)

    compiled, graphs = _compiled(fn, config)
    p, g, buf = torch.randn(32, 24), torch.randn(32, 24), torch.randn(32, 24)
    p_e, buf_e = p.clone(), buf.clone()
    for _ in range(2):
        compiled(p, g, buf)
        fn(p_e, g, buf_e)
        torch.testing.assert_close(p, p_e)
        torch.testing.assert_close(buf, buf_e)
    c = graphs.only()
    assert c.kernel_count == 1
    assert c.wrapper_source.count("into the input") == 2


def test_a_step_after_the_store_reading_the_old_value_keeps_the_copy(
    config: InductorConfig,
) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> None:
        old = x.clone()
        x.add_(1)
        y.copy_(old * 2)  # fused after x's new value, reading x's old one

    compiled, graphs = _compiled(fn, config)
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    x_e, y_e = x.clone(), y.clone()
    compiled(x, y)
    fn(x_e, y_e)
    torch.testing.assert_close(x, x_e)
    torch.testing.assert_close(y, y_e)
    c = graphs.only()
    assert c.kernel_count == 1
    assert c.wrapper_source.count("into the input") == 1  # y only
    assert "arg0.copy_(" in c.wrapper_source


def test_overlapping_inputs_at_run_time_take_the_copying_path(config: InductorConfig) -> None:
    compiled, graphs = _compiled(_sgd, config)
    # compiled for separate tensors (aot refuses overlapping ones when it compiles)
    compiled(torch.randn(100), torch.randn(100), torch.randn(4), torch.randn(4))
    base = torch.randn(102)
    p2, g2 = base[2:], base[:100]  # g2[i] is p2[i - 2]: a store into p2 would feed later loads
    base_e = base.clone()
    b2, gb2 = torch.randn(4), torch.randn(4)
    b2_e = b2.clone()
    compiled(p2, g2, b2, gb2)
    _sgd(base_e[2:], base_e[:100], b2_e, gb2)
    torch.testing.assert_close(base, base_e)
    torch.testing.assert_close(b2, b2_e)
    assert "return _safe(args)" in graphs.only().wrapper_source


def test_transposed_and_half_precision_inputs_are_written_in_their_own_layout(
    config: InductorConfig,
) -> None:
    def fn(w: torch.Tensor, h: torch.Tensor, g: torch.Tensor) -> None:
        with torch.no_grad():
            w.mul_(0.5).add_(g)
            h.add_(g.t())  # a float16 input updated from a float32 value

    compiled, graphs = _compiled(fn, config)
    w = torch.randn(24, 16).t()  # strides (1, 16)
    h = torch.randn(24, 16, dtype=torch.float16)
    g = torch.randn(16, 24)
    w_e, h_e = w.clone(), h.clone()
    compiled(w, h, g)
    fn(w_e, h_e, g)
    torch.testing.assert_close(w, w_e)
    torch.testing.assert_close(h, h_e, atol=2e-3, rtol=2e-3)
    assert w.stride() == (1, 16)
    assert graphs.only().wrapper_source.count("into the input") == 2


def test_writes_into_inputs_can_be_turned_off(config: InductorConfig) -> None:
    compiled, graphs = _compiled(_sgd, dataclasses.replace(config, write_inputs_in_place=False))
    p, b = _leaves((10, 3), (3,))
    g, gb = torch.randn(10, 3), torch.randn(3)
    p_e, b_e = _twins([p, b])
    compiled(p, g, b, gb)
    _sgd(p_e, g, b_e, gb)
    torch.testing.assert_close(p, p_e)
    torch.testing.assert_close(b, b_e)
    src = graphs.only().wrapper_source
    assert src.count(".copy_(") == 2 and "into the input" not in src


def test_inputs_outside_the_compiled_layout_run_the_graph_with_its_copies(
    config: InductorConfig,
) -> None:
    compiled, graphs = _compiled(_sgd, config)
    p, b = _leaves((6, 5), (5,))
    compiled(p, torch.randn(6, 5), b, torch.randn(5))
    p2 = torch.randn(5, 6).t()  # other strides: the compiled code does not apply
    g2, gb2, b2 = torch.randn(6, 5), torch.randn(5), torch.randn(5)
    p2_e, b2_e = p2.clone(), b2.clone()
    graphs.compiled.clear()
    compiled(p2, g2, b2, gb2)
    _sgd(p2_e, g2, b2_e, gb2)
    torch.testing.assert_close(p2, p2_e)
    torch.testing.assert_close(b2, b2_e)


@pytest.mark.parametrize("track", [True, False], ids=["batch-stats", "no-tracking"])
def test_batch_norm_running_stats_under_no_grad_are_stored_in_place(
    config: InductorConfig, track: bool
) -> None:
    bn = torch.nn.BatchNorm2d(4, track_running_stats=track)
    ref = torch.nn.BatchNorm2d(4, track_running_stats=track)
    graphs = Graphs(config)
    compiled = aot.aot_module(bn, graphs, keep_input_mutations=True)
    for _ in range(2):
        x = torch.randn(3, 4, 5, 5)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), ref(x))
    if track:
        torch.testing.assert_close(bn.running_mean, ref.running_mean)
        torch.testing.assert_close(bn.running_var, ref.running_var)
        assert int(bn.num_batches_tracked) == 2
        assert len(graphs.only().lowered.input_writes) == 3


def test_training_forward_stores_batch_norm_running_stats(config: InductorConfig) -> None:
    # with grad: aot's forward ends with the running stats' copy_ (they need no grad)
    def make() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8))

    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    graphs = Graphs(config)
    compiled = aot.aot_module(model, graphs, keep_input_mutations=True)
    for _ in range(3):
        x = torch.randn(5, 6)
        compiled(x).square().sum().backward()
        ref(x).square().sum().backward()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, n=name: f"{n}: {m}")
    # The Linear's bias gradient is 0 in exact arithmetic (batch norm takes the mean out): both
    # sides are rounding noise of the other gradients' size (~1e-6 of ~30; CI once saw 1.02e-5
    # between them), so it is checked to be noise; the others are compared as they are.
    scale = max(float(p.grad.abs().max()) for p in ref.parameters() if p.grad is not None)
    named = zip(model.named_parameters(), ref.parameters(), strict=True)
    for (name, a), b in named:
        if name == "0.bias":
            assert float(a.grad.abs().max()) <= 1e-5 * scale  # type: ignore[union-attr]
            continue
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    forward = graphs.compiled[0]
    assert isinstance(forward, CompiledGraph)
    assert len(forward.lowered.input_writes) == 3
    assert forward.wrapper_source.count("into the input") == 3
