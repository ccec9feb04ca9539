"""Tensors: operators, in-place ops, torch functions, nn.functional, methods, shapes, indexing."""

from __future__ import annotations

import math
import operator

import pytest
import torch
import torch.nn.functional as F
from vm_harness import check

X = torch.randn(4, 6)
Y = torch.randn(4, 6)


def op_add(x, y): return x + y
def op_sub(x, y): return x - y
def op_mul(x, y): return x * y
def op_div(x, y): return x / (y.abs() + 1)
def op_floordiv(x, y): return x // 0.3
def op_mod(x, y): return x % 0.7
def op_pow(x, y): return x ** 2
def op_rpow(x, y): return 2 ** x
def op_matmul(x, y): return x @ y.t()
def op_neg(x, y): return -x
def op_pos(x, y): return +x
def op_invert(x, y): return ~(x > 0)
def op_and(x, y): return (x > 0) & (y > 0)
def op_or(x, y): return (x > 0) | (y > 0)
def op_xor(x, y): return (x > 0) ^ (y > 0)
def op_lt(x, y): return x < y
def op_le(x, y): return x <= y
def op_gt(x, y): return x > y
def op_ge(x, y): return x >= 0.5
def op_eq(x, y): return x == y
def op_ne(x, y): return x != y
def op_radd(x, y): return 1 + x
def op_rsub(x, y): return 1 - x
def op_rmul(x, y): return 3 * x
def op_rtruediv(x, y): return 1 / (x.abs() + 1)
def op_chain(x, y): return (x + y) * (x - y) / 2 + 1


@pytest.mark.parametrize("fn", [
    op_add, op_sub, op_mul, op_div, op_floordiv, op_mod, op_pow, op_rpow, op_matmul, op_neg,
    op_pos, op_invert, op_and, op_or, op_xor, op_lt, op_le, op_gt, op_ge, op_eq, op_ne,
    op_radd, op_rsub, op_rmul, op_rtruediv, op_chain,
])
def test_tensor_operator_matches_eager(fn):
    compiled = check(fn, X, Y)
    assert compiled.graph_count == 1


def inplace_iadd(x, y):
    x += y
    return x


def inplace_imul_local(x, y):
    z = x * 1
    z *= y
    return z


def inplace_method(x, y):
    x.add_(y)
    x.mul_(2)
    return x.sum()


def inplace_relu_(x, y):
    F.relu_(x)
    return x


def inplace_setitem(x, y):
    x[0] = 0.0
    x[:, 1] = y[:, 1]
    return x


def inplace_no_return(x, y):
    x.zero_()


@pytest.mark.parametrize("fn", [
    inplace_iadd, inplace_imul_local, inplace_method, inplace_relu_, inplace_setitem,
    inplace_no_return,
])
def test_in_place_ops_mutate_inputs_like_eager(fn):
    check(fn, X, Y)


def torch_fns(x, y):
    return (torch.sin(x), torch.cos(y), torch.exp(x).log(), torch.tanh(x), torch.sigmoid(y),
            torch.clamp(x, -0.5, 0.5), torch.where(x > 0, x, y), torch.maximum(x, y))


def torch_reductions(x, y):
    return (torch.sum(x), x.sum(dim=1), x.mean(0, keepdim=True), torch.amax(x, dim=-1),
            x.argmax(dim=1), x.std(), torch.logsumexp(x, dim=0), x.norm())


def torch_shapes_ops(x, y):
    return (torch.cat([x, y], dim=0), torch.stack((x, y)), x.view(-1), x.reshape(2, 12),
            x.permute(1, 0), x.unsqueeze(0).squeeze(0), x.flatten(), x.transpose(0, 1).contiguous(),
            x.expand(2, 4, 6), torch.chunk(x, 2, dim=1)[1], x.split(2)[0])


def torch_factories(x, y):
    return (torch.zeros(3, 2), torch.ones_like(x), torch.full((2,), 7.0), torch.arange(5),
            torch.eye(3), torch.zeros_like(y, dtype=torch.float64), torch.tensor([1.0, 2.0]),
            torch.empty(2, 2).fill_(3.0), torch.linspace(0, 1, 5))


def torch_dtype_device(x, y):
    return x.to(torch.float64), x.double(), x.half().float(), x.to("cpu"), x.int(), x.bool()


def functional_calls(x, y):
    return (F.relu(x), F.gelu(y), F.softmax(x, dim=-1), F.log_softmax(x, -1), F.silu(x),
            F.layer_norm(x, (6,)), F.dropout(x, p=0.0, training=True), F.normalize(y, dim=1),
            F.leaky_relu(x, 0.1), F.pad(x, (1, 1)), F.mse_loss(x, y), F.linear(x, y))


def tensor_methods(x, y):
    return (x.abs(), x.clone(), x.detach(), x.exp(), x.pow(2), x.clamp(min=0),
            x.masked_fill(x > 0, 1.0),
            x.type_as(y), x.new_zeros(2), x.sum().neg(), x.max(dim=1).values, x.topk(2).indices)


def tensor_metadata(x, y):
    n = x.size(0) + x.size(-1) + x.dim() + x.numel() + x.ndim + len(x)
    rows, cols = x.shape
    return (x * n + rows - cols, x.shape, x.size(), x.dtype, x.device, x.requires_grad,
            x.is_contiguous())


def tensor_shape_arith(x, y):
    b = x.shape[0]
    return x.view(b, 2, -1).sum(-1) * math.sqrt(x.shape[-1])


def tensor_indexing(x, y):
    return (x[0], x[:, 1], x[1:3, ::2], x[..., -1], x[None], x[:, None, :],
            x[torch.tensor([0, 2])], x[0, 0])


def tensor_T(x, y):
    return x.T @ y, x.mT.shape


def tensor_iteration(x, y):
    total = 0
    for row in x:
        total = total + row.sum()
    return total


def tensor_unpack(x, y):
    a, b, c, d = x
    return a + b * c - d


def torch_softmax_attention(x, y):
    w = torch.softmax(x @ y.transpose(-2, -1) / math.sqrt(6), dim=-1)
    return w @ y


def builtin_abs_on_tensor(x, y):
    return abs(x) + abs(-y)


def sum_of_tensors(x, y):
    return sum([x, y, x * y])


def torch_nn_init_like(x, y):
    return torch.nn.functional.one_hot(torch.arange(4), 5).float() @ torch.ones(5, 2)


def cumulative_ops(x, y):
    return torch.cumsum(x, 0), x.cumprod(1), torch.flip(x, [0]), torch.roll(x, 1, 0), torch.tril(x)


def einsum_and_bmm(x, y):
    return torch.einsum("ij,kj->ik", x, y), torch.bmm(x[None], y.t()[None])


def conv_and_pool(x, y):
    img = x.reshape(1, 1, 4, 6)
    w = torch.ones(2, 1, 3, 3)
    return F.max_pool2d(F.conv2d(img, w, padding=1), 2), F.avg_pool2d(img, 2)


def requires_grad_input(x, y):
    return (x * y).sum()


@pytest.mark.parametrize("fn", [
    torch_fns, torch_reductions, torch_shapes_ops, torch_factories, torch_dtype_device,
    functional_calls, tensor_methods, tensor_metadata, tensor_shape_arith, tensor_indexing,
    tensor_T, tensor_iteration, tensor_unpack, torch_softmax_attention, builtin_abs_on_tensor,
    sum_of_tensors, torch_nn_init_like, cumulative_ops, einsum_and_bmm,
    conv_and_pool,
])
def test_torch_calls_match_eager(fn):
    compiled = check(fn, X, Y)
    assert compiled.graph_count == 1


def test_gradients_match_through_captured_graph():
    from vm_harness import run_vm

    w = torch.randn(4, 6, requires_grad=True)
    compiled = run_vm(requires_grad_input, w, Y)
    compiled.output.backward()
    vm_grad = w.grad.clone()
    w.grad = None
    requires_grad_input(w, Y).backward()
    torch.testing.assert_close(vm_grad, w.grad)


def test_shape_queries_fold_to_constants_and_add_no_nodes():
    def fn(x):
        return x.reshape(x.shape[0] * x.size(1))

    compiled = check(fn, X)
    assert compiled.targets() == ["reshape"]
    assert compiled.ops()[0].args[1] == 24


def test_operator_nodes_use_operator_targets():
    compiled = check(op_chain, X, Y)
    assert compiled.targets() == [operator.add, operator.sub, operator.mul, operator.truediv,
                                  operator.add]


def test_constant_only_function_needs_no_graph():
    def fn(x):
        return x.shape[0] * 2, x.dtype

    compiled = check(fn, X)
    assert compiled.graph_count == 0


def test_input_returned_unchanged_is_not_a_graph_output():
    def fn(x, y):
        return x, y + 1

    compiled = check(fn, X, Y)
    gm = compiled.result.graphs[0].gm
    assert compiled.placeholders() == ["y"]
    assert len(list(gm.graph.nodes)[-1].args[0]) == 1


def returns_named_result(x, y):
    result = x.max(dim=1)
    return result, torch.sort(y, dim=0)


def test_named_tuple_results_keep_their_type():
    compiled = check(returns_named_result, X, Y)
    assert type(compiled.output[0]).__name__ == "max"


def asks_for_modes(x):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if _get_current_dispatch_mode_stack():
        return x - 1
    return x + 1


def test_dispatch_mode_queries_answer_for_the_caller_not_the_tracer():
    compiled = check(asks_for_modes, X)
    assert compiled.op_count() == 1


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def uses_autograd_function(x):
    return Square.apply(x) + 1


def test_custom_autograd_function_is_one_node_and_its_backward_runs():
    from vm_harness import run_vm

    x = torch.randn(3, requires_grad=True)
    compiled = check(uses_autograd_function, x)
    assert compiled.op_count() == 2
    out = run_vm(uses_autograd_function, x).output
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
