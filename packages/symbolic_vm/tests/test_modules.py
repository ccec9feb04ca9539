"""nn.Module: parameters and buffers as inputs, containers, flags, submodule calls, guards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from vm_harness import check, run_vm

from guards import compile_guards


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        return self.lin(x) * self.scale


class SequentialNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4), nn.Tanh())

    def forward(self, x):
        return self.body(x)


class ModuleListNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        return self.layers[-1](x)


class ModuleDictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        return {name: head(x) for name, head in self.heads.items()}


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self.lin(x) * 2
        return self.lin(x)


class CustomAttrs(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = "gelu"
        self.depth = 2
        self.lin = nn.Linear(4, 4)

    def helper(self, x):
        return F.gelu(x) if self.act == "gelu" else F.relu(x)

    def forward(self, x):
        for _ in range(self.depth):
            x = self.helper(self.lin(x))
        return x


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x, scale=1.0):
        return x @ self.w * scale


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.norm = nn.LayerNorm(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.norm(self.inner(x, scale=0.5)))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x)))).flatten(1)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)

    def forward(self, idx):
        return self.head(self.emb(idx)).log_softmax(-1)


class ParamList(nn.Module):
    def __init__(self):
        super().__init__()
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(2)])

    def forward(self, x):
        for w in self.ws:
            x = x * w
        return x


class NamedParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.a.weight.sum() + self.a.bias.mean() * self.a.in_features


class NoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        if self.lin.bias is None:
            return self.lin(x)
        return x


class GRUCellLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(4, 12)
        self.hh = nn.Linear(4, 12)

    def forward(self, x, h):
        gi, gh = self.ih(x), self.hh(h)
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


@pytest.mark.parametrize("module_cls", [
    WithBuffer, SequentialNet, ModuleListNet, ModuleDictNet, TrainingFlag, CustomAttrs, Outer,
    NamedParams, NoBias, ParamList,
])
@pytest.mark.parametrize("train", [True, False])
def test_module_forward_matches_eager(module_cls, train):
    torch.manual_seed(0)
    model = module_cls().train(train)
    compiled = check(model.forward, torch.randn(2, 4))
    assert compiled.graph_count == 1


def test_conv_batchnorm_module_in_eval_mode():
    model = Conv().eval()
    check(model.forward, torch.randn(2, 1, 5, 5))


def test_batchnorm_in_training_updates_running_stats_like_eager():
    model = Conv().train()
    x = torch.randn(2, 1, 5, 5)
    twin = Conv().train()
    twin.load_state_dict(model.state_dict())
    expected = twin(x)
    compiled = run_vm(model.forward, x)
    torch.testing.assert_close(compiled.output, expected)
    torch.testing.assert_close(model.bn.running_mean, twin.bn.running_mean)
    assert int(model.bn.num_batches_tracked) == int(twin.bn.num_batches_tracked)


def test_embedding_module():
    model = Embed()
    check(model.forward, torch.tensor([[1, 2, 3], [4, 5, 6]]))


def test_two_input_module():
    model = GRUCellLike()
    check(model.forward, torch.randn(2, 4), torch.randn(2, 4))


def test_parameters_are_graph_inputs_named_by_their_source():
    model = Outer()
    compiled = check(model.forward, torch.randn(2, 4))
    assert compiled.placeholders() == ["x", "l_self_inner_w", "l_self_norm_weight",
                                       "l_self_norm_bias"]


def test_module_guards_pin_the_modules_and_the_training_flag():
    model = TrainingFlag().train()
    compiled = run_vm(model.forward, torch.randn(2, 4))
    text = compile_guards(compiled.result.guards, {}).text
    assert "CONSTANT_MATCH: L['self'].training" in text
    # The module and its submodule (read through _modules) are pinned by MODULE_PARAMS, with
    # the parameters read through them.
    assert "MODULE_PARAMS: L['self'] submodules=1 parameters=2" in text


def test_module_attribute_write_is_replayed():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.last = None
            self.calls = 0

        def forward(self, x):
            y = x * 2
            self.last = y
            self.calls = self.calls + 1
            return y + 1

    model = Cache()
    x = torch.randn(3)
    compiled = run_vm(model.forward, x)
    torch.testing.assert_close(compiled.output, x * 2 + 1)
    torch.testing.assert_close(model.last, x * 2)
    assert model.calls == 1


def test_module_with_backward_hooks_is_unsupported():
    from symbolic_vm import Unsupported

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

    model = Wrapper()
    model.lin.register_full_backward_hook(lambda m, gin, gout: None)  # forward hooks inline
    with pytest.raises(Unsupported, match="backward hooks"):
        run_vm(model.forward, torch.randn(2, 4))


def test_super_init_style_module_method_inlines_through_super():
    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

    class Child(Base):
        def forward(self, x):
            return super().forward(x) * 3

    model = Child()
    check(model.forward, torch.randn(2, 4))


TORCH_MODULES = {
    "multihead_attention": lambda: (nn.MultiheadAttention(8, 2, batch_first=True).eval(),
                                    lambda m, x: m(x, x, x)),
    "transformer_encoder_layer": lambda: (
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
        lambda m, x: m(x)),
    "lstm": lambda: (nn.LSTM(8, 8, batch_first=True), lambda m, x: m(x)),
    "gru": lambda: (nn.GRU(8, 8, batch_first=True), lambda m, x: m(x)),
    "group_norm": lambda: (nn.GroupNorm(2, 8), lambda m, x: m(x.transpose(1, 2))),
    "upsample": lambda: (nn.Upsample(scale_factor=2), lambda m, x: m(x)),
    "flatten_unflatten": lambda: (nn.Sequential(nn.Flatten(), nn.Unflatten(1, (5, 8))),
                                  lambda m, x: m(x)),
}


@pytest.mark.parametrize("name", list(TORCH_MODULES))
def test_torch_library_modules_inline_into_one_graph(name):
    torch.manual_seed(0)
    module, call = TORCH_MODULES[name]()

    def fn(x):
        return call(module, x)

    compiled = check(fn, torch.randn(2, 5, 8))
    assert compiled.graph_count == 1


def test_module_iterators_give_sourced_parameters():
    model = Outer()

    def fn(x):
        total = x
        for name, p in model.named_parameters():
            total = total + p.sum()
        return total, len(list(model.modules())), [n for n, _ in model.named_children()]

    compiled = check(fn, torch.randn(4))
    text = compile_guards(compiled.result.guards, fn.__globals__).text
    assert "_modules['inner']._parameters['w']" in text  # read through the module dicts


def test_a_hook_added_after_capture_fails_the_guard():
    model = WithBuffer()
    x = torch.randn(2, 4)
    compiled = run_vm(model.forward, x)
    assert compiled.guard({"self": model, "x": x})
    model.lin.register_forward_hook(lambda m, i, o: o * 0)
    assert not compiled.guard({"self": model, "x": x})


class IndexedParamList(nn.Module):
    def __init__(self):
        super().__init__()
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(4)) for _ in range(3)])

    def forward(self, x):
        for w in self.ws:
            x = x + w
        return x * self.ws[-1] - self.ws[1]


def test_parameter_list_items_are_read_through_its_parameters_dict():
    model = IndexedParamList()
    x = torch.randn(4)
    compiled = check(model.forward, x)
    text = compile_guards(compiled.result.guards, model.forward.__globals__).text
    # guarded as module parameters (one MODULE_PARAMS), not through ParameterList.__getitem__
    assert "MODULE_PARAMS" in text and "_modules['ws']._parameters['2']" in text
    assert "_size == 3" in text
    assert compiled.guard({"self": model, "x": x})
    model.ws.append(nn.Parameter(torch.randn(4)))  # ws[-1] and the loop change
    assert not compiled.guard({"self": model, "x": x})


def test_parameter_list_with_a_plain_item_matches_eager():
    model = IndexedParamList()
    model.ws.append(2.5)  # stored as a plain attribute, not in _parameters

    def fn(x):
        return x * model.ws[-1] + model.ws[0]

    check(fn, torch.randn(4))
