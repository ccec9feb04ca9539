"""keep_input_mutations: inference graphs write mutated inputs themselves (final copy_ nodes)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aot


class _Recorder:
    """A compiler that records the graphs it is given and runs them as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs.append(gm)
        return aot.identity_compiler(gm, example_inputs)


def _copies_into_inputs(gm: torch.fx.GraphModule) -> list[int]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [
        placeholders.index(n.args[0])
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
    ]


def _mutating_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and getattr(getattr(n.target, "_schema", None), "is_mutable", False)
    ]


def _sgd(w: torch.Tensor, b: torch.Tensor, gw: torch.Tensor, gb: torch.Tensor,
         loss: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        w.sub_(0.1 * gw)
        b.sub_(0.1 * gb)
    return loss.detach()


def _params() -> tuple[torch.Tensor, ...]:
    w, b = torch.randn(5, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    gw, gb = torch.randn(5, 3), torch.randn(3)
    loss = (w.sum() * 2).requires_grad_()
    return w, b, gw, gb, loss


def test_an_optimizer_step_is_an_inference_graph_ending_in_copies_into_the_parameters(
    helpers: Any,
) -> None:
    rec = _Recorder()
    compiled = aot.aot_function(_sgd, rec, keep_input_mutations=True)
    w, b, gw, gb, loss = _params()
    w_e, b_e = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    versions = (w._version, b._version)
    out = compiled(w, b, gw, gb, loss)
    want = _sgd(w_e, b_e, gw, gb, loss)
    helpers.assert_close(out, want, "returned loss")
    helpers.assert_close(w, w_e, "updated weight")
    helpers.assert_close(b, b_e, "updated bias")
    art = compiled.artifacts
    assert art is not None and art.bw_gm is None  # no backward: nothing new requires grad
    (gm,) = rec.graphs
    # one final copy_ per mutated input, the graph's only mutations, after every other op
    assert _copies_into_inputs(gm) == [0, 1]
    assert [n.target for n in _mutating_nodes(gm)] == [torch.ops.aten.copy_.default] * 2
    tail = list(gm.graph.nodes)[-3:]
    assert [n.op for n in tail] == ["call_function", "call_function", "output"]
    # the new values are not outputs: the runtime has nothing to copy back
    assert len(tail[-1].args[0]) == len(art.meta.traced) - 2
    assert art.meta.mutations_in_graph == (0, 1)
    # as eager: still leaves that require grad, no history, versions bumped, grad mode kept
    assert w.is_leaf and b.is_leaf and w.requires_grad and w.grad_fn is None
    assert w._version > versions[0] and b._version > versions[1]
    assert torch.is_grad_enabled()


def test_without_the_flag_new_values_are_returned_and_copied_back(helpers: Any) -> None:
    rec = _Recorder()
    compiled = aot.aot_function(_sgd, rec)
    w, b, gw, gb, loss = _params()
    w_e = w.detach().clone()
    compiled(w, b, gw, gb, loss)
    with torch.no_grad():
        w_e.sub_(0.1 * gw)
    helpers.assert_close(w, w_e, "updated weight")
    (gm,) = rec.graphs
    assert _mutating_nodes(gm) == []


def test_a_mutation_through_a_view_copies_the_whole_new_input(helpers: Any) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x[1:].mul_(y)
        return x * 3, x[0]  # a new tensor from the new value, and a view of the input

    rec = _Recorder()
    compiled = aot.aot_function(fn, rec, keep_input_mutations=True)
    x, y = torch.randn(4, 2), torch.randn(2)
    x_e = x.clone()
    got = compiled(x, y)
    want = fn(x_e, y)
    helpers.assert_close(x, x_e, "mutated input")
    helpers.assert_close(got[0], want[0], "output from the new value")
    helpers.assert_close(got[1], want[1], "view of the input")
    assert got[1]._base is x  # a real view of the (updated) input
    (gm,) = rec.graphs
    assert _copies_into_inputs(gm) == [0]


def test_training_forward_writes_buffers_that_need_no_grad(helpers: Any) -> None:
    # BatchNorm's running stats in a training graph: the forward ends with their copy_
    # (they are not forward outputs any more); gradients and stats as eager
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    ref.load_state_dict(model.state_dict())
    rec = _Recorder()
    compiled = aot.aot_module(model, rec, keep_input_mutations=True)
    # Weighted, not a plain sum: batch norm takes out the mean of its upstream gradient, so
    # after `.sum()` every gradient but the bn bias's is 0 in exact arithmetic (rounding noise)
    weights = torch.randn(8, 4)
    for _ in range(2):
        x = torch.randn(8, 4)
        (compiled(x) * weights).sum().backward()
        (ref(x) * weights).sum().backward()
    helpers.assert_close(model[1].running_mean, ref[1].running_mean, "running mean")
    helpers.assert_close(model[1].running_var, ref[1].running_var, "running var")
    assert int(model[1].num_batches_tracked) == int(ref[1].num_batches_tracked) == 2
    helpers.assert_close(model[0].weight.grad, ref[0].weight.grad, "weight grad")
    helpers.assert_close(model[1].weight.grad, ref[1].weight.grad, "bn weight grad")
    art = compiled.artifacts
    assert art is not None and art.bw_gm is not None
    assert len(_copies_into_inputs(art.fw_gm)) == 3  # mean, var, num_batches_tracked
    assert _mutating_nodes(art.bw_gm) == []
    # eval mode under no_grad: an inference graph, which mutates nothing in eval mode
    model.eval()
    ref.eval()
    with torch.no_grad():
        helpers.assert_close(compiled(x), ref(x), "eval output")


@pytest.mark.parametrize("partition", ["default", "min_cut"])
def test_a_buffer_whose_old_value_the_backward_reads_is_not_overwritten_first(
    helpers: Any, partition: str
) -> None:
    def fn(w: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        loss = (w * buf.clone()).sum()  # d loss / d w is the old buf
        buf.add_(1)
        return loss

    rec = _Recorder()
    partition_fn = aot.min_cut_partition if partition == "min_cut" else aot.default_partition
    compiled = aot.aot_function(fn, rec, partition_fn=partition_fn, keep_input_mutations=True)
    w, buf = torch.randn(5, requires_grad=True), torch.randn(5)
    w_e, buf_e = w.detach().clone().requires_grad_(), buf.clone()
    compiled(w, buf).backward()
    fn(w_e, buf_e).backward()
    helpers.assert_close(w.grad, w_e.grad, "gradient from the old value")
    helpers.assert_close(buf, buf_e, "updated buffer")
    art = compiled.artifacts
    assert art is not None and art.fw_gm is not None
    placeholders = [n for n in art.fw_gm.graph.nodes if n.op == "placeholder"]
    out = next(n for n in art.fw_gm.graph.nodes if n.op == "output")
    saves_buf = placeholders[1] in out.args[0]
    # written in the forward only when the forward does not hand buf itself to the backward
    assert art.meta.mutations_in_graph == (() if saves_buf else (1,))
