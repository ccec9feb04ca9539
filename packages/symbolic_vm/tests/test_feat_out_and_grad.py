"""``out=`` arguments of torch functions, and ``.grad``/``detach``/``data``/``requires_grad_``."""

from __future__ import annotations

import pytest
import torch
from feat_support import compiled, fresh_counter
from vm_harness import check, run_vm

from symbolic_vm import Unsupported


def add_out(a, b, c):
    r = torch.add(a, b, out=c)
    return r * 2


def test_add_out_writes_the_caller_tensor_in_place():
    compiled_run = check(add_out, torch.randn(4), torch.randn(4), torch.zeros(4))
    assert compiled_run.graph_count == 1


def test_out_call_returns_the_out_tensor_itself():
    def fn(a, b, c):
        r = torch.add(a, b, out=c)
        return r is c, r

    check(fn, torch.randn(3), torch.randn(3), torch.empty(3))
    a, b, c = torch.randn(3), torch.randn(3), torch.empty(3)
    same, r = run_vm(fn, a, b, c).output
    assert same is True and r is c


def test_empty_out_is_resized_to_the_result_as_eager_does():
    # check() compares the inputs after the call too: c must come back with shape (4,).
    check(add_out, torch.randn(4), torch.randn(4), torch.empty(0))


def test_mm_out_resizes_an_empty_out_and_later_reads_see_the_new_shape():
    def fn(a, b, c):
        torch.mm(a, b, out=c)
        return c.sum(0), c.shape

    check(fn, torch.randn(3, 4), torch.randn(4, 5), torch.empty(0))


def test_tuple_out_writes_every_tensor_and_returns_the_named_result():
    def fn(x, values, indices):
        r = torch.max(x, 1, out=(values, indices))
        return r.values + 1, r.indices, r[0] is values, type(r).__name__

    compiled_run = check(fn, torch.randn(3, 4), torch.empty(0), torch.empty(0, dtype=torch.long))
    assert compiled_run.graph_count == 1


def test_out_tensor_made_inside_the_function():
    def fn(a, b):
        buf = torch.empty(0)
        torch.mul(a, b, out=buf)
        return buf + 1

    check(fn, torch.randn(5), torch.randn(5))


def test_out_none_is_the_plain_call():
    def fn(a, b):
        return torch.add(a, b, out=None)

    check(fn, torch.randn(2), torch.randn(2))


def test_out_that_eager_rejects_is_unsupported_not_guessed():
    def fn(a, b, c):
        return torch.add(a, b, out=c)

    with pytest.raises(RuntimeError):
        fn(torch.randn(2), torch.randn(2), torch.empty(2, dtype=torch.long))
    with pytest.raises(Unsupported):
        run_vm(fn, torch.randn(2), torch.randn(2), torch.empty(2, dtype=torch.long))


def test_out_through_compile_api_is_visible_to_the_caller_and_recompiles_on_a_sized_out():
    counter = fresh_counter()
    fn = compiled(add_out, counter)
    a, b = torch.randn(4), torch.randn(4)
    for _ in range(2):
        c = torch.empty(0)
        torch.testing.assert_close(fn(a, b, c), add_out(a, b, torch.empty(0)))
        torch.testing.assert_close(c, a + b)
    assert counter.count == 1  # a fresh empty out matches the guards
    c = torch.zeros(4)
    fn(a, b, c)
    torch.testing.assert_close(c, a + b)
    assert counter.count == 2  # an out of another size fails TENSOR_MATCH


# -- .grad, detach, data, requires_grad_ -------------------------------------------------------


def grad_step(x):
    if x.grad is None:
        return x * 2
    return x - 0.1 * x.grad


def test_grad_of_an_input_leaf_is_read_as_a_graph_input():
    x = torch.randn(3, requires_grad=True)
    x.grad = torch.randn(3)
    compiled_run = check(grad_step, x)
    assert len(compiled_run.placeholders()) == 2  # x and x.grad


def test_grad_none_folds_the_branch():
    compiled_run = check(grad_step, torch.randn(3, requires_grad=True))
    assert compiled_run.op_count() == 1


def test_setting_grad_after_the_first_compile_recompiles():
    counter = fresh_counter()
    fn = compiled(grad_step, counter)
    x = torch.randn(3, requires_grad=True)
    torch.testing.assert_close(fn(x), grad_step(x))
    x.grad = torch.ones(3)
    torch.testing.assert_close(fn(x), grad_step(x))
    assert counter.count == 2
    x.grad = None
    torch.testing.assert_close(fn(x), grad_step(x))
    assert counter.count == 2  # the first entry serves again


def test_parameter_grad_inside_a_module():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, y):
            g = self.lin.weight.grad
            return self.lin(y) + (0 if g is None else g.sum()), self.lin.bias.grad

    model = Scaled()
    model(torch.randn(4, 3)).__getitem__(0).sum().backward()
    check(model.forward, torch.randn(4, 3))
    model.zero_grad(set_to_none=True)
    check(model.forward, torch.randn(4, 3))


def test_grad_of_a_tensor_made_in_the_graph_is_none():
    def fn(x):
        y = x * 2
        return y.grad is None, y

    check(fn, torch.randn(3))


def test_detach_data_and_requires_grad_on_intermediates():
    def fn(x):
        y = x.detach()
        z = x.data
        w = (x * 2).requires_grad_()
        return y + 1, z * 2, w, w.requires_grad, y.requires_grad

    compiled_run = check(fn, torch.randn(3, requires_grad=True))
    assert compiled_run.graph_count == 1


def test_requires_grad_on_an_input_that_already_has_it_is_a_no_op():
    def fn(x):
        x.requires_grad_()
        return x * 3

    compiled_run = check(fn, torch.randn(3, requires_grad=True))
    assert compiled_run.op_count() == 1


def test_requires_grad_changing_an_input_is_refused_cleanly():
    def fn(x):
        x.requires_grad_()
        return x * 3

    with pytest.raises(Unsupported, match="requires_grad_"):
        run_vm(fn, torch.randn(3))


def resize_then_use(a, b, c):
    before = c.shape
    torch.add(a, b, out=c)
    c.mul_(2)
    return c + 1, before, c.shape


def test_resized_out_is_read_and_changed_later_in_the_same_graph():
    compiled_run = check(resize_then_use, torch.randn(4), torch.randn(4), torch.empty(0))
    assert compiled_run.graph_count == 1


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_resizing_out_works_with_a_functionalizing_backend(backend):
    from feat_support import compile_api

    if compile_api is None:
        pytest.skip("compile_api cannot be imported")
    compile_api.reset()
    fn = compile_api.compile(resize_then_use, backend=backend, fullgraph=True)
    a, b = torch.randn(4), torch.randn(4)
    for sized in (0, 0, 4):
        c_compiled, c_eager = torch.zeros(sized), torch.zeros(sized)
        got, expected = fn(a, b, c_compiled), resize_then_use(a, b, c_eager)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
        torch.testing.assert_close(c_compiled, c_eager)


def clear_and_set_grads(w, v, x):
    w.grad = None
    v.grad = x * 2
    return v.grad + 1, w.grad is None


def test_grad_assignments_are_side_effects_replayed_after_the_graph():
    def make():
        w = torch.ones(3, requires_grad=True)
        w.grad = torch.ones(3)
        return w, torch.zeros(3, requires_grad=True), torch.arange(3.0)

    eager_args, vm_args = make(), make()
    expected = clear_and_set_grads(*eager_args)
    compiled_run = run_vm(clear_and_set_grads, *vm_args)  # fullgraph: no break
    torch.testing.assert_close(compiled_run.output, expected)
    assert vm_args[0].grad is None
    torch.testing.assert_close(vm_args[1].grad, eager_args[1].grad)
    assert compiled_run.op_count() == 2  # mul, add


@pytest.mark.parametrize(
    ("value", "why"),
    [(lambda w: w.sum(), "another shape"), (lambda w: w, "its own"), (lambda w: 3, "assigning")],
)
def test_grad_assignments_eager_would_refuse_are_refused(value, why):
    def fn(w):
        w.grad = value(w)
        return w * 2

    with pytest.raises(Unsupported, match=why):
        run_vm(fn, torch.ones(3, requires_grad=True))
