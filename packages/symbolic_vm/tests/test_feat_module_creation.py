"""nn.Modules created inside the compiled function: stateless torch.nn modules and user
modules are traced like eager runs them; a module that would create parameters or buffers
is refused with a clear reason (a graph break), never a crash or a stale tensor."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from vm_harness import check, run_vm

from symbolic_vm import Unsupported


def test_stateless_torch_module_made_and_called_inline():
    def fn(x):
        return nn.ReLU()(x) + nn.Softmax(dim=-1)(x) + nn.Dropout(p=0.0)(x)

    compiled_run = check(fn, torch.randn(2, 3))
    assert compiled_run.graph_count == 1


def test_sequential_of_stateless_modules_made_inside():
    def fn(x):
        block = nn.Sequential(nn.Tanh(), nn.LeakyReLU(0.2), nn.Flatten())
        return block(x)

    check(fn, torch.randn(2, 3, 4))


class Gate(nn.Module):
    def __init__(self, scale, act=None):
        super().__init__()
        self.scale = scale
        self.act = act or nn.Sigmoid()

    def forward(self, x):
        if self.training:
            x = x * self.scale
        return self.act(x) * x


def test_user_module_constructed_and_called():
    def fn(x):
        return Gate(2.0)(x), Gate(0.5, nn.GELU())(x)

    check(fn, torch.randn(4))


def test_user_module_eval_mode_is_honoured():
    class Plain(nn.Module):
        def forward(self, x):
            return x + 1 if self.training else x - 1

    def fn(x):
        return Plain()(x)

    check(fn, torch.randn(3))


def test_torch_module_with_parameters_made_inside_is_refused_cleanly():
    def fn(x):
        return nn.Linear(3, 2)(x)

    x = torch.randn(2, 3)
    state = torch.get_rng_state()
    with pytest.raises(Unsupported, match="parameters or buffers"):
        run_vm(fn, x)
    assert torch.equal(torch.get_rng_state(), state)  # the trace did not consume the RNG


def test_user_module_creating_a_parameter_is_refused_cleanly():
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w

    def fn(x):
        return Affine()(x)

    with pytest.raises(Unsupported):
        run_vm(fn, torch.randn(3))


def test_parameter_module_made_inside_graph_breaks_under_compile_api():
    from feat_support import compiled, fresh_counter

    def fn(x):
        y = x + 1
        lin = nn.Linear(3, 3)
        return lin(y).shape, y

    counter = fresh_counter()
    shape, y = compiled(fn, counter, fullgraph=False)(torch.randn(2, 3))
    assert shape == torch.Size([2, 3])
    torch.testing.assert_close(y, y)  # ran (eagerly where it had to): no crash


def test_modules_made_inside_can_be_returned_fresh_on_every_call():
    def fn(x):
        gate = Gate(3.0)
        relu = nn.ReLU()
        return gate(x), gate, relu

    x = torch.randn(4)
    compiled_run = run_vm(fn, x)
    _, gate, relu = compiled_run.output
    assert isinstance(gate, Gate) and isinstance(gate.act, nn.Sigmoid) and gate.training
    assert dict(gate.named_children()) == {"act": gate.act}  # registered like eager's
    torch.testing.assert_close(gate(x), Gate(3.0)(x))
    torch.testing.assert_close(relu(x), x.relu())
    _, gate2, relu2 = compiled_run.fn(x)
    assert gate2 is not gate and gate2.act is not gate.act and relu2 is not relu
