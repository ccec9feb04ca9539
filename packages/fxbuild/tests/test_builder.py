"""GraphBuilder: naming, fake propagation, dynamic shapes, output, errors."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import is_symbolic

from fxbuild import FakePropagationError, GraphBuilder, is_fake


def build_readme_toy(builder, a, b):
    pa = builder.placeholder("a", a)
    pb = builder.placeholder("b", b)
    abs_a = builder.call_function(torch.abs, (pa,))
    denom = builder.call_function(operator.add, (abs_a, 1))
    x = builder.call_function(operator.truediv, (pa, denom))
    total = builder.call_method("sum", (pb,))
    lt = builder.call_function(operator.lt, (total, 0))
    return builder.finish([x, lt])


def test_node_names_follow_torch_fx_defaults_as_in_the_dynamo_readme():
    builder = GraphBuilder()
    gm = build_readme_toy(builder, torch.randn(10), torch.randn(10))
    names = [n.name for n in gm.graph.nodes]
    assert names == ["a", "b", "abs_1", "add", "truediv", "sum_1", "lt", "output"]


def test_graph_module_matches_eager_on_the_real_inputs():
    a, b = torch.randn(10), torch.randn(10)
    builder = GraphBuilder()
    gm = build_readme_toy(builder, a, b)
    x, lt = gm(*builder.example_inputs)
    torch.testing.assert_close(x, a / (torch.abs(a) + 1))
    assert bool(lt) == bool(b.sum() < 0)


def test_output_node_returns_a_tuple_even_for_one_value():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(3))
    y = builder.call_function(torch.sin, (p,))
    gm = builder.finish([y])
    out = gm(torch.zeros(3))
    assert isinstance(out, tuple) and len(out) == 1


def test_every_node_carries_a_fake_example_value_with_the_right_metadata():
    builder = GraphBuilder()
    x = builder.placeholder("x", torch.randn(4, 5))
    w = builder.placeholder("w", torch.randn(6, 5, dtype=torch.float32))
    y = builder.call_function(torch.nn.functional.linear, (x, w))
    z = builder.call_method("to", (y, torch.float64))
    for node, shape, dtype in [(x, (4, 5), torch.float32), (y, (4, 6), torch.float32),
                               (z, (4, 6), torch.float64)]:
        value = builder.example_value(node)
        assert is_fake(value)
        assert tuple(value.shape) == shape and value.dtype == dtype


def test_placeholders_added_late_stay_before_the_operations_in_input_order():
    builder = GraphBuilder()
    x = builder.placeholder("x", torch.randn(2))
    y = builder.call_function(torch.neg, (x,))
    w = builder.placeholder("weight", torch.randn(2))
    z = builder.call_function(operator.mul, (y, w))
    gm = builder.finish([z])
    ops = [n.op for n in gm.graph.nodes]
    assert ops == ["placeholder", "placeholder", "call_function", "call_function", "output"]
    a, b = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(gm(a, b)[0], -a * b)


def test_placeholder_names_are_made_valid_and_unique():
    builder = GraphBuilder()
    p1 = builder.placeholder("self.fc.weight", torch.randn(2))
    p2 = builder.placeholder("x", torch.randn(2))
    p3 = builder.placeholder("x", torch.randn(2))
    assert p1.name == "self_fc_weight"
    assert p2.name == "x" and p3.name != "x"


def test_dynamic_true_makes_every_dim_symbolic_except_sizes_zero_and_one():
    builder = GraphBuilder(dynamic=True)
    p = builder.placeholder("x", torch.randn(3, 1, 5))
    fake = builder.example_value(p)
    assert is_symbolic(fake.shape[0]) and is_symbolic(fake.shape[2])
    assert not is_symbolic(fake.shape[1])
    y = builder.call_method("sum", (p, 0))
    out = builder.example_value(y)
    assert is_symbolic(out.shape[1])


def test_dynamic_dims_marks_only_the_chosen_dims_symbolic():
    builder = GraphBuilder(dynamic=False)
    p = builder.placeholder("x", torch.randn(3, 4), dynamic_dims=[1])
    fake = builder.example_value(p)
    assert not is_symbolic(fake.shape[0]) and is_symbolic(fake.shape[1])


def test_static_builder_keeps_concrete_sizes():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(3, 4))
    assert builder.example_value(p).shape == (3, 4)
    assert builder.shape_env is not None


def test_int_inputs_become_symints_when_dynamic_and_stay_ints_otherwise():
    dyn = GraphBuilder(dynamic=True)
    n = dyn.placeholder("n", 7)
    assert isinstance(dyn.example_value(n), torch.SymInt)
    static = GraphBuilder()
    m = static.placeholder("n", 7)
    assert static.example_value(m) == 7


def test_symint_input_flows_into_ops_and_the_graph_runs_with_a_new_value():
    builder = GraphBuilder(dynamic=True)
    x = builder.placeholder("x", torch.randn(4, 6))
    n = builder.placeholder("n", 3)
    y = builder.call_method("view", (x, -1, n))
    assert is_symbolic(builder.example_value(y).shape[1])
    gm = builder.finish([y])
    t = torch.randn(2, 6)
    (out,) = gm(t, 2)
    torch.testing.assert_close(out, t.view(-1, 2))


def test_data_dependent_op_raises_fake_propagation_error():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(5))
    with pytest.raises(FakePropagationError) as info:
        builder.call_function(torch.nonzero, (p,))
    assert info.value.data_dependent
    assert info.value.target == "nonzero"


def test_item_is_data_dependent():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(5))
    s = builder.call_method("sum", (p,))
    with pytest.raises(FakePropagationError) as info:
        builder.call_method("item", (s,))
    assert info.value.data_dependent


def test_shape_mismatch_raises_fake_propagation_error_that_is_not_data_dependent():
    builder = GraphBuilder()
    a = builder.placeholder("a", torch.randn(2, 3))
    b = builder.placeholder("b", torch.randn(4, 5))
    with pytest.raises(FakePropagationError) as info:
        builder.call_function(torch.matmul, (a, b))
    assert not info.value.data_dependent


def test_in_place_op_updates_the_example_value_and_runs_like_eager():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(3))
    q = builder.call_method("mul_", (p, 2))
    r = builder.call_function(operator.add, (q, 1))
    gm = builder.finish([r])
    t = torch.randn(3)
    expected = t * 2 + 1
    torch.testing.assert_close(gm(t.clone())[0], expected)


def test_nested_containers_and_kwargs_are_propagated():
    builder = GraphBuilder()
    a = builder.placeholder("a", torch.randn(2, 3))
    b = builder.placeholder("b", torch.randn(2, 3))
    c = builder.call_function(torch.cat, ([a, b],), {"dim": 1})
    assert builder.example_value(c).shape == (2, 6)
    gm = builder.finish([c])
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(gm(x, y)[0], torch.cat([x, y], dim=1))


def test_outputs_may_mix_nodes_and_constants():
    builder = GraphBuilder()
    a = builder.placeholder("a", torch.randn(2))
    b = builder.call_function(torch.cos, (a,))
    gm = builder.finish([b, 3])
    t = torch.randn(2)
    out = gm(t)
    torch.testing.assert_close(out[0], torch.cos(t))
    assert out[1] == 3


def test_example_inputs_are_the_real_values_in_placeholder_order():
    x, w = torch.randn(2), torch.randn(2)
    builder = GraphBuilder()
    builder.placeholder("x", x)
    builder.placeholder("w", w)
    assert builder.example_inputs[0] is x and builder.example_inputs[1] is w


def test_finish_twice_is_an_error():
    builder = GraphBuilder()
    p = builder.placeholder("x", torch.randn(1))
    builder.finish([p])
    with pytest.raises(RuntimeError):
        builder.finish([p])


def test_requires_grad_inputs_propagate_to_example_values():
    builder = GraphBuilder()
    w = builder.placeholder("w", torch.randn(3, requires_grad=True))
    y = builder.call_function(torch.tanh, (w,))
    assert builder.example_value(y).requires_grad
    gm = builder.finish([y])
    real = torch.randn(3, requires_grad=True)
    gm(real)[0].sum().backward()
    assert real.grad is not None


def test_slices_with_symbolic_bounds_are_propagated():
    builder = GraphBuilder(dynamic=True)
    x = builder.placeholder("x", torch.randn(8))
    n = builder.call_method("size", (x, 0))
    half = builder.call_function(operator.floordiv, (n, 2))
    y = builder.call_function(operator.getitem, (x, slice(None, half, None)))
    assert is_symbolic(builder.example_value(y).shape[0])
    gm = builder.finish([y])
    t = torch.randn(6)
    torch.testing.assert_close(gm(t)[0], t[:3])


def test_ops_returning_python_objects_keep_them_as_example_values():
    builder = GraphBuilder()
    mode = builder.call_function(torch.amp.autocast_mode._enter_autocast,
                                 ("cpu", torch.bfloat16, True, True))
    builder.call_function(torch.amp.autocast_mode._exit_autocast, (mode,))
    assert not torch.is_autocast_enabled("cpu")
    assert builder.example_value(mode) is not None


def test_redirect_makes_later_uses_and_outputs_name_the_replacement():
    b = GraphBuilder()
    x = b.placeholder("x", torch.randn(3))
    early = b.call_function(torch.neg, (x,))
    replacement = b.call_function(torch.add, (x, 1))
    b.redirect(x, replacement)
    late = b.call_function(torch.mul, (x, 2))
    gm = b.finish([x, early, late])
    inp = torch.randn(3)
    got_x, got_early, got_late = gm(inp)
    torch.testing.assert_close(got_x, inp + 1)
    torch.testing.assert_close(got_early, -inp)  # made before the redirect: unchanged
    torch.testing.assert_close(got_late, (inp + 1) * 2)


@pytest.mark.parametrize("value", [-3, 0, 1, 2, 9])
def test_symbolic_int_input_is_a_fresh_symbol_for_any_value_and_the_graph_runs_with_others(value):
    builder = GraphBuilder()  # not dynamic: the caller asks for this one int only
    x = builder.placeholder("x", torch.randn(4))
    n = builder.placeholder("n", value, symbolic=True)
    example = builder.example_value(n)
    assert isinstance(example, torch.SymInt) and is_symbolic(example)
    y = builder.call_function(operator.mul, (x, n))
    gm = builder.finish([y])
    t = torch.randn(4)
    for other in (-1, 0, 1, 5):
        (out,) = gm(t, other)
        torch.testing.assert_close(out, t * other)


def test_symbolic_int_equal_to_a_size_gets_its_own_symbol():
    builder = GraphBuilder(dynamic=True)
    x = builder.placeholder("x", torch.randn(4))
    n = builder.placeholder("n", 4, symbolic=True)
    size = builder.example_value(x).shape[0]
    assert str(builder.example_value(n).node.expr) != str(size.node.expr)


def test_static_placeholder_keeps_sizes_under_a_dynamic_builder_but_honours_dynamic_dims():
    builder = GraphBuilder(dynamic=True)
    w = builder.placeholder("w", torch.randn(3, 4), static=True)
    assert not any(is_symbolic(s) for s in builder.example_value(w).shape)
    m = builder.placeholder("m", torch.randn(3, 4), static=True, dynamic_dims=[1])
    shape = builder.example_value(m).shape
    assert not is_symbolic(shape[0]) and is_symbolic(shape[1])
    x = builder.placeholder("x", torch.randn(3, 4))
    assert all(is_symbolic(s) for s in builder.example_value(x).shape)


def test_subgraph_lifts_outer_nodes_as_placeholders_in_the_order_asked() -> None:
    builder = GraphBuilder()
    a = builder.placeholder("a", torch.randn(3))
    b = builder.placeholder("b", torch.randn(3))
    doubled = builder.call_function(torch.mul, (a, 2))
    sub = builder.subgraph()
    # b first, then the outer graph's doubled: the subgraph lifts both, in use order
    node = sub.call_function(torch.add, (b, doubled))
    assert list(sub.lifted) == [b, doubled]
    sub.order_inputs([doubled, a, b])  # a unused here: still an input (a sibling's signature)
    gm = sub.finish([node])
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert names == ["mul", "a", "b"]
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(gm(x * 2, x, y), (y + x * 2,))
    attr = builder.submodule("branch", gm)
    outer = builder.finish([attr])
    assert outer.branch_0 is gm
