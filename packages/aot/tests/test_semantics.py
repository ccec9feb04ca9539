"""Input mutation, output aliasing, non-differentiable and non-tensor outputs, inference, errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aot

PARTITION_NAMES = ["default", "min_cut", "decomp_min_cut"]


def _grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, inputs)


@pytest.mark.parametrize("compiler", [aot.identity_compiler, aot.eager_compiler],
                         ids=["identity", "eager"])
@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_input_mutation_applied_once_and_gradients_match(
    helpers: Any, partition: str, compiler: Any
) -> None:
    def fn(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        acc.add_(x.detach() * 2)  # an accumulator buffer, updated in place
        acc.mul_(0.5)
        return (x * acc).sin().sum()

    compiled = aot.aot_function(fn, compiler, **helpers.PARTITIONS[partition])
    x = torch.randn(5, requires_grad=True)
    acc_eager, acc_compiled = torch.ones(5), torch.ones(5)
    for _ in range(2):
        expected = fn(x, acc_eager)
        actual = compiled(x, acc_compiled)
        helpers.assert_close(actual, expected, "output")
        helpers.assert_close(acc_compiled, acc_eager, "mutated input")
        helpers.assert_close(_grads(actual, [x]), _grads(expected, [x]), "grad")
    assert acc_compiled._version > 0


def test_mutation_of_a_non_leaf_input_that_requires_grad(helpers: Any) -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        a.mul_(3)
        return a.cos()

    w = torch.randn(4, requires_grad=True)
    compiled = aot.aot_function(fn, aot.identity_compiler)
    a_eager, a_compiled = w * 1.0, w * 1.0
    out_eager, out_compiled = fn(a_eager), compiled(a_compiled)
    helpers.assert_close(out_compiled, out_eager, "output")
    helpers.assert_close(a_compiled, a_eager, "mutated input")
    loss_e = out_eager.sum() + a_eager.sum()
    loss_c = out_compiled.sum() + a_compiled.sum()
    helpers.assert_close(_grads(loss_c, [w]), _grads(loss_e, [w]), "grad through the mutation")


def test_mutation_through_a_view_of_an_input(helpers: Any) -> None:
    def fn(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        buf[1:3].add_(1.0)
        return x * buf.sum()

    compiled = aot.aot_function(fn, aot.identity_compiler)
    x = torch.randn(3, requires_grad=True)
    b_eager, b_compiled = torch.zeros(4), torch.zeros(4)
    helpers.assert_close(compiled(x, b_compiled), fn(x, b_eager), "output")
    helpers.assert_close(b_compiled, b_eager, "buffer")


def test_mutating_a_leaf_that_requires_grad_raises_like_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    leaf = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fn(leaf)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        aot.aot_function(fn, aot.identity_compiler)(leaf)


@pytest.mark.parametrize("compiler", [aot.identity_compiler, aot.eager_compiler],
                         ids=["identity", "eager"])
def test_a_leaf_updated_under_no_grad_is_updated_like_eager(helpers: Any, compiler: Any) -> None:
    # An optimizer step: the parameters are leaves that require grad, written in place under
    # no_grad. The runtime's copy-back must happen with grad off too, as the program wrote it.
    def step(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        loss = (x @ w + b).square().mean()
        with torch.no_grad():
            w.sub_(0.1 * x.sum())
            b.mul_(0.5)
        return loss

    compiled = aot.aot_function(step, compiler)
    w_e, b_e = torch.randn(3, 2, requires_grad=True), torch.randn(2, requires_grad=True)
    w_c, b_c = w_e.detach().clone().requires_grad_(), b_e.detach().clone().requires_grad_()
    for _ in range(2):
        x = torch.randn(4, 3)
        helpers.assert_close(compiled(w_c, b_c, x), step(w_e, b_e, x), "loss")
        helpers.assert_close(w_c, w_e, "updated weight")
        helpers.assert_close(b_c, b_e, "updated bias")
    assert w_c.is_leaf and b_c.is_leaf and w_c.grad_fn is None


@pytest.mark.parametrize("compiler", [aot.identity_compiler, aot.eager_compiler],
                         ids=["identity", "eager"])
@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_outputs_that_view_inputs_and_each_other_are_real_views(
    helpers: Any, partition: str, compiler: Any
) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> Any:
        z = x * y
        return x.t(), x[1], z, z.view(-1), z[:, 0].unsqueeze(0), y.view(6)

    compiled = aot.aot_function(fn, compiler, **helpers.PARTITIONS[partition])
    x = torch.randn(2, 3, requires_grad=True)
    y = torch.randn(2, 3)
    expected, actual = fn(x, y), compiled(x, y)
    for e, a in zip(expected, actual):
        helpers.assert_close(a, e, "output")
        assert a.shape == e.shape and a.stride() == e.stride()
        assert a.requires_grad == e.requires_grad
    x_t, x_row, z, z_flat, z_col, y_flat = actual
    assert x_t._base is x and x_row._base is x
    assert z_flat._base is z and z_col._base is z
    assert y_flat._base is y
    # Rebuilt with the same view ops as eager, so autograd records the same view nodes.
    view_nodes = [type(o.grad_fn).__name__ for o in actual if o._base is not None]
    assert view_nodes == [
        type(o.grad_fn).__name__ for o in expected if o._base is not None
    ] == ["TBackward0", "SelectBackward0", "ViewBackward0", "UnsqueezeBackward0", "NoneType"]
    # Views share storage: writing through one is seen by the others, as in eager.
    with torch.no_grad():
        z_flat[0] = 100.0
    assert z[0, 0].item() == 100.0
    loss_e = sum(o.sum() * (i + 1) for i, o in enumerate(fn(x, y)) if o.requires_grad)
    loss_c = sum(o.sum() * (i + 1) for i, o in enumerate(compiled(x, y)) if o.requires_grad)
    helpers.assert_close(_grads(loss_c, [x]), _grads(loss_e, [x]), "grad")


def test_views_of_an_intermediate_that_is_not_returned(helpers: Any) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        base = x.exp()
        return base[0], base[1]

    x = torch.randn(2, 3, requires_grad=True)
    a, b = aot.aot_function(fn, aot.identity_compiler)(x)
    ea, eb = fn(x)
    helpers.assert_close((a, b), (ea, eb), "outputs")
    assert a._base is not None and a._base is b._base
    helpers.assert_close(_grads(a.sum() + 2 * b.sum(), [x]), _grads(ea.sum() + 2 * eb.sum(), [x]),
                         "grad")


def test_returning_an_input_returns_the_same_object() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x + y

    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    out = aot.aot_function(fn, aot.identity_compiler)(x, y)
    assert out[0] is x


@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_non_differentiable_and_non_tensor_outputs(helpers: Any, partition: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> dict[str, Any]:
        h = torch.relu(x @ w)
        return {"loss": h.pow(2).mean(), "argmax": h.argmax(dim=1), "n": 3, "name": "mlp"}

    compiled = aot.aot_function(fn, aot.identity_compiler, **helpers.PARTITIONS[partition])
    x, w = torch.randn(6, 4), torch.randn(4, 5, requires_grad=True)
    expected, actual = fn(x, w), compiled(x, w)
    assert actual.keys() == expected.keys()
    assert actual["n"] == 3 and actual["name"] == "mlp"
    assert torch.equal(actual["argmax"], expected["argmax"])
    assert actual["argmax"].dtype == torch.int64 and not actual["argmax"].requires_grad
    helpers.assert_close(actual["loss"], expected["loss"], "loss")
    helpers.assert_close(_grads(actual["loss"], [w]), _grads(expected["loss"], [w]), "grad")


def test_inference_path_when_grad_is_off_or_not_required(helpers: Any) -> None:
    model = helpers.MLP()
    compiled = aot.aot_module(model, aot.identity_compiler)
    x = torch.randn(3, 16)
    with torch.no_grad():
        out = compiled(x)
    art = compiled.artifacts
    assert art is not None and art.bw_gm is None and art.joint_gm is None
    assert not out.requires_grad
    helpers.assert_close(out, model(x), "no_grad output")
    for p in model.parameters():
        p.requires_grad_(False)
    compiled(x)
    assert compiled.artifacts is not None and compiled.artifacts.bw_gm is None
    helpers.assert_close(compiled(x), model(x), "no-requires-grad output")


@pytest.mark.parametrize("partition", PARTITION_NAMES)
def test_graphs_have_no_mutating_or_aliasing_ops(helpers: Any, partition: str) -> None:
    def fn(x: torch.Tensor, buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        buf.add_(1)
        y = x.view(-1).t().unsqueeze(0).expand(2, -1)
        y = y.transpose(0, 1).contiguous()
        y[0].mul_(2)  # in-place on an intermediate view
        return (y * buf.sum()).relu().sum(), x.view(-1)

    options = helpers.PARTITIONS[partition]
    compiled = aot.aot_function(fn, aot.identity_compiler, **options)
    x = torch.randn(4, requires_grad=True)
    compiled(x, torch.zeros(2))
    art = compiled.artifacts
    assert art is not None and art.bw_gm is not None and art.joint_gm is not None
    for gm in (art.joint_gm, art.fw_gm, art.bw_gm):
        assert helpers.mutating_or_aliasing_ops(gm) == []
    model = aot.aot_module(helpers.ConvNet(), aot.identity_compiler, **options)
    model(torch.randn(2, 3, 8, 8))
    art = model.artifacts
    assert art is not None and art.bw_gm is not None
    for gm in (art.fw_gm, art.bw_gm):
        assert helpers.mutating_or_aliasing_ops(gm) == []
    with torch.no_grad():
        model(torch.randn(2, 3, 8, 8))
    assert model.artifacts is not None
    assert helpers.mutating_or_aliasing_ops(model.artifacts.fw_gm) == []


def test_the_scan_for_mutating_ops_flags_them(helpers: Any) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.view(-1)
        y.add_(1)
        return y

    gm = make_fx(fn)(torch.randn(2, 2))
    assert sorted(helpers.mutating_or_aliasing_ops(gm)) == ["aten.add_.Tensor", "aten.view.default"]


def test_double_backward_raises_a_clear_error() -> None:
    compiled = aot.aot_function(lambda x: (x**3).sum(), aot.identity_compiler)
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(aot.DoubleBackwardError, match="double backward"):
        torch.autograd.grad(compiled(x), x, create_graph=True)


def test_new_shapes_and_requires_grad_compile_new_graphs(helpers: Any) -> None:
    calls: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        calls.append(len(example_inputs))
        return gm

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sum(0)

    compiled = aot.aot_function(fn, counting)
    a, b = torch.randn(3, 2, requires_grad=True), torch.randn(3, 2)
    compiled(a, b)
    compiled(a, b)
    assert len(calls) == 2  # one forward and one backward compile, reused
    c, d = torch.randn(5, 4), torch.randn(5, 4)
    helpers.assert_close(compiled(c, d), fn(c, d), "new shape")
    assert len(calls) == 3  # an inference graph for the new signature
    a2 = torch.randn(3, 2)
    b2 = torch.randn(3, 2, requires_grad=True)
    out = compiled(a2, b2)
    helpers.assert_close(_grads(out.sum(), [b2]), _grads(fn(a2, b2).sum(), [b2]), "grad of y")
    assert len(calls) == 5


def test_kwargs_and_nested_inputs(helpers: Any) -> None:
    def fn(xs: list[torch.Tensor], *, scale: float, extra: dict[str, torch.Tensor]) -> Any:
        return (xs[0] * scale + xs[1] * extra["w"]).sum(), [xs[0].shape[0]]

    compiled = aot.aot_function(fn, aot.identity_compiler)
    xs = [torch.randn(3, requires_grad=True), torch.randn(3)]
    w = torch.randn(3, requires_grad=True)
    expected = fn(xs, scale=2.0, extra={"w": w})
    actual = compiled(xs, scale=2.0, extra={"w": w})
    assert actual[1] == [3]
    helpers.assert_close(actual[0], expected[0], "output")
    helpers.assert_close(_grads(actual[0], [xs[0], w]), _grads(expected[0], [xs[0], w]), "grads")
    helpers.assert_close(compiled(xs, scale=3.0, extra={"w": w})[0],
                         fn(xs, scale=3.0, extra={"w": w})[0], "new constant")


def test_eager_compiler_runs_copies_as_views_but_never_aliases_outputs(helpers: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = x @ w.t()  # the transposed weight: a copy in the graph, a view when run
        return h.t().contiguous(), h, w.t().clone()

    compiled = aot.aot_function(fn, aot.eager_compiler)
    x, w = torch.randn(3, 4), torch.randn(5, 4, requires_grad=True)
    actual, expected = compiled(x, w), fn(x, w)
    helpers.assert_close(actual, expected, "outputs")
    storages = {o.untyped_storage().data_ptr() for o in actual}
    assert len(storages) == 3 and w.untyped_storage().data_ptr() not in storages
    art = compiled.artifacts
    assert art is not None
    fw = aot.eager_compiler(art.fw_gm, [])
    ops = [str(n.target) for n in fw.graph.nodes if n.op == "call_function"]
    assert "aten.t.default" in ops  # at least one copy became a view
    assert helpers.mutating_or_aliasing_ops(art.fw_gm) == []  # aot's own graph stays alias-free


def test_batch_norm_mutation_is_functionalized_even_when_its_kernel_is_decomposed(
    helpers: Any,
) -> None:
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    for ops in ([], [aten.native_batch_norm.default],
                [aten._native_batch_norm_legit_functional.default]):
        eager = torch.nn.BatchNorm1d(4)
        model = torch.nn.BatchNorm1d(4)
        compiled = aot.aot_module(model, aot.identity_compiler,
                                  decompositions=get_decompositions(ops))
        for _ in range(2):
            x = torch.randn(8, 4, requires_grad=True)
            helpers.assert_close(compiled(x), eager(x), f"output, decomposing {ops}")
        helpers.assert_close(model.running_mean, eager.running_mean, "running_mean")
        helpers.assert_close(model.running_var, eager.running_var, "running_var")
        assert int(model.num_batches_tracked) == 2
        art = compiled.artifacts
        assert art is not None and art.bw_gm is not None
        for gm in (art.fw_gm, art.bw_gm):
            assert helpers.mutating_or_aliasing_ops(gm) == []


def test_a_decomposition_that_mutates_below_functionalization_is_refused() -> None:
    def add_in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        out.copy_(x)
        return out.add_(y)  # in place on an intermediate, below functionalization

    compiled = aot.aot_function(
        lambda x: torch.sin(x) + x, aot.identity_compiler,
        decompositions={torch.ops.aten.add.Tensor: add_in_place},
    )
    with pytest.raises(aot.AotTracingError, match="still mutates"):
        compiled(torch.randn(3))


def test_tensors_made_from_python_data_inside_the_function(helpers: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * torch.tensor([1.0, 2.0, 3.0]) + torch.tensor(2.0)

    compiled = aot.aot_function(fn, aot.identity_compiler)
    x = torch.randn(3, requires_grad=True)
    helpers.assert_close(compiled(x), fn(x), "output")
    helpers.assert_close(_grads(compiled(x).sum(), [x]), _grads(fn(x).sum(), [x]), "grad")
    with torch.no_grad():
        helpers.assert_close(compiled(x), fn(x), "inference output")


def test_mutating_an_input_that_overlaps_another_input_gives_eagers_result() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a + b

    compiled = aot.aot_function(fn, aot.identity_compiler)
    out = compiled(torch.zeros(4), torch.ones(4))  # separate inputs: the compiled graph
    torch.testing.assert_close(out, torch.full((4,), 2.0))
    for make in (lambda b: (b[:4], b[:4]), lambda b: (b[:4], b[2:]), lambda b: (b[2:], b[:4])):
        eager_buf, buf = torch.zeros(6), torch.zeros(6)
        expected = fn(*make(eager_buf))
        torch.testing.assert_close(compiled(*make(buf)), expected)
        torch.testing.assert_close(buf, eager_buf)


def test_written_input_overlaps_compares_memory_ranges() -> None:
    b = torch.zeros(6)
    assert aot.written_input_overlaps([b[:4], b[2:]], [0])
    assert aot.written_input_overlaps([b[::2], b[1:2]], [1])  # inside the strided span
    assert not aot.written_input_overlaps([b[:3], b[3:]], [0])  # disjoint slices
    assert not aot.written_input_overlaps([b[:4], b[2:], torch.ones(2)], [2])  # only reads overlap
    assert not aot.written_input_overlaps([b, b], [])


def test_separate_backward_compiler_and_custom_partitioner_are_used(helpers: Any) -> None:
    seen: list[str] = []

    def fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append("fw")
        return gm

    def bw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append("bw")
        assert all(isinstance(e, torch.Tensor) for e in example_inputs)
        return gm

    def partition(joint: torch.fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int) -> Any:
        seen.append(f"partition({num_fwd_outputs})")
        return aot.min_cut_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    compiled = aot.aot_function(lambda x: (x.sin() * 2, x.argmax()), fw, bw, partition)
    x = torch.randn(5, requires_grad=True)
    out = compiled(x)
    assert seen == ["partition(2)", "fw", "bw"]
    helpers.assert_close(_grads(out[0].sum(), [x]), (torch.cos(x) * 2,), "grad")


def test_a_returned_detach_is_regenerated_as_an_alias_of_its_input() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    compiled = aot.aot_function(fn, aot.identity_compiler)
    x = torch.zeros(3, requires_grad=True)
    out = compiled(x)
    assert not out.requires_grad and out.data_ptr() == x.data_ptr()
    out.add_(1)
    torch.testing.assert_close(x.detach(), torch.ones(3))


@pytest.mark.parametrize(
    "write",
    [
        lambda x: x.as_strided((3, 3), (1, 1)).add_(1),  # elements share memory
        lambda x: x.set_(torch.ones(2)),
        lambda x: x.resize_(2),
    ],
    ids=["overlapping_as_strided", "set_", "resize_"],
)
def test_what_a_functional_graph_cannot_express_is_refused(write: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        write(x)
        return x + 1

    with pytest.raises(aot.AotUnsupportedError):
        aot.aot_function(fn, aot.identity_compiler)(torch.zeros(6))


def test_a_data_write_to_a_leaf_that_requires_grad_is_copied_back_without_grad() -> None:
    def fn(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = (x * w).sum()
        w.data.mul_(0.5)
        return y

    compiled = aot.aot_function(fn, aot.identity_compiler)
    w, w_eager = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    x = torch.arange(3.0)
    compiled(w, x).backward()
    fn(w_eager, x).backward()
    assert w.is_leaf
    torch.testing.assert_close(w.detach(), w_eager.detach())
    torch.testing.assert_close(w.grad, w_eager.grad)


def test_a_tensor_subclass_input_and_a_graph_running_autograd_are_refused() -> None:
    class Tagged(torch.Tensor):
        pass

    with pytest.raises(aot.AotUnsupportedError, match="subclass"):
        aot.aot_function(lambda x: x * 2, aot.identity_compiler)(torch.ones(2).as_subclass(Tagged))

    def penalty(x: torch.Tensor) -> torch.Tensor:
        (g,) = torch.autograd.grad(x.pow(3).sum(), x, create_graph=True)
        return g.sum()

    gm = torch.fx.symbolic_trace(penalty)
    with pytest.raises(aot.AotUnsupportedError, match="calls autograd"):
        aot.aot_eager(gm, [torch.ones(2, requires_grad=True)])
