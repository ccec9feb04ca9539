"""Module state read through its dicts, guarded by MODULE_PARAMS: same results as eager, and a
recompile (or the eager result) whenever what the trace read changes.

Every model is compiled through compile_api with a counting backend and compared with eager on
the same inputs after each change.
"""

from __future__ import annotations

import dis
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from counting_backend import Counting
from torch import nn

import compile_api
import evalframe


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    compile_api.reset()
    yield
    compile_api.reset()


def same(compiled: Callable[..., Any], eager: Callable[..., Any], *args: Any) -> None:
    got, want = compiled(*args), eager(*args)
    torch.testing.assert_close(got, want)
    assert got.requires_grad == want.requires_grad


def seq(n: int = 3) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(n)])


def entry_for(code: Any) -> Any:
    (entry,) = evalframe.cache_entries(code)[:1]
    return entry


def guard_text(code: Any) -> str:
    return str(entry_for(code).guard.compiled_guards.text)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = seq(2)
        self.norm = nn.BatchNorm1d(8)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.body(x)))


def reader_calls(code: Any) -> list[str]:
    """The parameter readers (``__strata_<n>_params_<k>``) the transformed code loads."""
    return [
        str(i.argval) for i in dis.get_instructions(code)
        if i.opname == "LOAD_GLOBAL" and "_params_" in str(i.argval)
    ]


def test_parameters_come_from_one_reader_and_are_guarded_by_module_params() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    same(opt, model, x * 3)
    assert backend.count == 1
    code = entry_for(nn.Sequential.forward.__code__).code
    # No path reads at all: one reader hands the graph its 6 parameters.
    assert not {"_modules", "_parameters", "__getitem__", "weight"} & set(code.co_names)
    assert len(reader_calls(code)) == 1
    text = guard_text(nn.Sequential.forward.__code__)
    assert "MODULE_PARAMS: L['self'] submodules=3 parameters=6" in text
    # No TENSOR_MATCH of its own per parameter (MODULE_PARAMS lists their metadata, indented).
    assert not any(line.startswith("TENSOR_MATCH: L['self']") for line in text.splitlines())
    assert "DICT_KEYS: L['self']._modules" in text


def test_transformed_code_spreads_the_reader_into_the_graph_call() -> None:
    model = seq(2)
    opt = compile_api.compile(model, backend=Counting())
    opt(torch.randn(2, 8))
    code = entry_for(nn.Sequential.forward.__code__).code
    ops = [i.opname for i in dis.get_instructions(code)]
    # graph(input, *reader()): one unpacking, no subscript per parameter before the call.
    assert "LIST_EXTEND" in ops and "CALL_FUNCTION_EX" in ops
    assert ops.count("BINARY_SUBSCR") == 1  # the graph's output tuple, once
    assert len(reader_calls(code)) == 1


def test_buffers_are_still_read_through_their_dicts() -> None:
    model = Block()
    opt = compile_api.compile(model, backend=Counting())
    x = torch.randn(4, 8)
    model.eval()
    same(opt, model, x)
    code = entry_for(Block.forward.__code__).code
    reads = [i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_ATTR"]
    # self._modules once, the BatchNorm's _modules entry and its _buffers once: parameters of
    # all three Linear/BatchNorm modules come from one reader.
    assert reads.count("_modules") == 1
    assert reads.count("_buffers") == 1
    assert "_parameters" not in reads
    assert len(reader_calls(code)) == 1


def test_replacing_a_submodule_recompiles() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model[1] = nn.Linear(8, 8)
    same(opt, model, x)
    assert backend.count == 2


def test_replacing_a_parameter_gives_the_eager_result() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model[0].weight = nn.Parameter(torch.randn(8, 8))
    same(opt, model, x)
    assert backend.count == 2  # another parameter object: MODULE_PARAMS identity fails


def test_parameter_data_of_another_shape_recompiles() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    with torch.no_grad():
        model[2].weight.data = torch.randn(4, 8)
        model[2].bias.data = torch.randn(4)
    same(opt, model, x)
    assert backend.count == 2


def test_parameter_requires_grad_change_recompiles() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    for p in model.parameters():
        p.requires_grad_(False)
    same(opt, model, x)
    assert backend.count == 2


def test_weight_data_changed_in_place_is_a_cache_hit() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    with torch.no_grad():
        model[0].weight.mul_(2)
    same(opt, model, x)
    assert backend.count == 1


def test_forward_hook_on_a_submodule_gives_the_eager_result() -> None:
    model, backend = seq(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    handle = model[1].register_forward_hook(lambda mod, args, out: out * 10)
    try:
        same(opt, model, x)
    finally:
        handle.remove()
    same(opt, model, x)


def test_global_forward_hook_gives_the_eager_result() -> None:
    model, backend = seq(), Counting()

    def run(x: torch.Tensor) -> torch.Tensor:  # no wrapper module of compile_api's around it
        return model(x)

    opt = compile_api.compile(run, backend=backend)
    x = torch.randn(2, 8)
    same(opt, run, x)
    seen: list[str] = []

    def hook(mod: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        seen.append(type(mod).__name__)
        return out + 1

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        got = opt(x)
        compiled_calls = list(seen)
        seen.clear()
        want = run(x)
        torch.testing.assert_close(got, want)
        assert compiled_calls == seen == ["Linear"] * 3 + ["Sequential"]
    finally:
        handle.remove()
    same(opt, run, x)
    assert backend.count >= 1


def test_global_hook_guard_is_in_every_entry() -> None:
    model = seq()
    opt = compile_api.compile(model, backend=Counting())
    opt(torch.randn(2, 8))
    text = guard_text(nn.Sequential.forward.__code__)
    assert "_global_forward_hooks" in text and "_global_backward_pre_hooks" in text


def test_called_submodules_are_guarded_by_one_module_calls_per_modules_dict() -> None:
    model = seq()
    opt = compile_api.compile(model, backend=Counting())
    opt(torch.randn(2, 8))
    text = guard_text(nn.Sequential.forward.__code__)
    lines = [line for line in text.splitlines() if line.startswith("MODULE_CALLS:")]
    assert lines == [
        "MODULE_CALLS: L['self']._modules keys=['0', '1', '2'] "
        "(class, no hooks, the class forward inlined and not shadowed)"
    ]
    assert "called_modules" not in text  # no SHAPE line calling a Python check of its own


def test_train_and_eval_follow_eager() -> None:
    model, backend = Block(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(4, 8)
    model.train()
    same(opt, model, x)
    model.eval()
    same(opt, model, x)
    assert backend.count == 2
    model.train()
    same(opt, model, x)
    assert backend.count == 2  # the train entry again


def test_buffers_are_read_through_buffers_dict() -> None:
    model, backend = Block().eval(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(4, 8)
    same(opt, model, x)
    code = entry_for(Block.forward.__code__).code
    assert "_buffers" in code.co_names
    model.norm.running_mean = torch.full((8,), 0.5)  # a new buffer tensor of the same kind
    same(opt, model, x)


def test_reordering_a_sequential_recompiles() -> None:
    net = nn.Sequential(OrderedDict([("a", nn.Linear(8, 8)), ("b", nn.Tanh())]))
    counting = Counting()
    opt = compile_api.compile(net, backend=counting)
    x = torch.randn(2, 8)
    same(opt, net, x)
    first = net._modules.pop("a")
    net._modules["a"] = first  # same keys and modules, other order: Tanh runs first now
    same(opt, net, x)
    assert counting.count == 2


def test_appending_to_a_sequential_recompiles() -> None:
    model, backend = seq(2), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model.append(nn.Linear(8, 8))
    same(opt, model, x)
    assert backend.count == 2


class Indexing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})
        self.seq = seq(2)

    def forward(self, x: torch.Tensor) -> Any:
        h = self.layers[0](x) + self.layers[-1](x) + self.seq[1](x)
        return self.heads["a"](h), self.heads["b"](h)


def test_constant_indexing_reads_the_modules_dict() -> None:
    model, backend = Indexing(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    for got, want in zip(opt(x), model(x), strict=True):
        torch.testing.assert_close(got, want)
    text = guard_text(Indexing.forward.__code__)
    assert "__getitem__" not in entry_for(Indexing.forward.__code__).code.co_names
    assert "MODULE_PARAMS: L['self']" in text
    model.layers.append(nn.Linear(8, 8))  # layers[-1] is another module now
    for got, want in zip(opt(x), model(x), strict=True):
        torch.testing.assert_close(got, want)
    assert backend.count == 2


class OwnGetattr(nn.Module):
    """A module whose class overrides __getattr__: its state keeps the normal path."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def __getattr__(self, name: str) -> Any:
        return super().__getattr__(name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 2


def test_a_class_with_its_own_getattr_keeps_the_attribute_path() -> None:
    model, backend = OwnGetattr(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    text = guard_text(OwnGetattr.forward.__code__)
    assert "L['self']._modules" not in text
    assert "MODULE_PARAMS: L['self'].lin submodules=0 parameters=2" in text  # Linear is stock
    model.lin = nn.Linear(8, 8)
    same(opt, model, x)
    assert backend.count == 2


class WithProperty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    @property
    def scale(self) -> float:
        return 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def test_properties_and_plain_attributes_keep_their_path() -> None:
    model, backend = WithProperty(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    same(opt, model, x + 1)
    assert backend.count == 1


GLOBAL_MODEL = seq(2)


def uses_global_model(x: torch.Tensor) -> torch.Tensor:
    return GLOBAL_MODEL(x) * 2


def test_a_global_module_is_read_by_name_and_guarded() -> None:
    backend = Counting()
    opt = compile_api.compile(uses_global_model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, uses_global_model, x)
    code = entry_for(uses_global_model.__code__).code
    assert len(reader_calls(code)) == 1  # its parameters, identity-guarded at their paths
    assert "MODULE_PARAMS: G['GLOBAL_MODEL']" in guard_text(uses_global_model.__code__)
    with torch.no_grad():
        GLOBAL_MODEL[0].weight.data = torch.randn(8, 8, dtype=torch.float64)
        GLOBAL_MODEL[0].bias.data = torch.randn(8, dtype=torch.float64)
    try:
        with pytest.raises(RuntimeError):
            uses_global_model(x)  # eager raises (dtype mismatch) ...
        with pytest.raises(RuntimeError):
            opt(x)  # ... and so does the compiled function, after recompiling
    finally:
        GLOBAL_MODEL[0].weight.data = torch.randn(8, 8)
        GLOBAL_MODEL[0].bias.data = torch.randn(8)


def act_stack() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh())


def test_hook_on_a_parameter_free_submodule_gives_the_eager_result() -> None:
    model, backend = act_stack(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    handle = model[1].register_forward_pre_hook(lambda mod, args: (args[0] * -1,))
    try:
        same(opt, model, x)
    finally:
        handle.remove()
    same(opt, model, x)


def test_forward_patched_on_an_instance_inside_a_sequential_recompiles() -> None:
    model, backend = act_stack(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model[3].forward = torch.sigmoid  # the instance now shadows Tanh.forward
    same(opt, model, x)
    assert backend.count == 2


class Doubling(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


def test_changing_a_submodules_class_recompiles() -> None:
    model, backend = act_stack(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model[2].__class__ = Doubling  # same object, same parameters, another forward
    same(opt, model, x)
    assert backend.count == 2


def test_patching_a_class_forward_recompiles() -> None:
    model, backend = act_stack(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    original = nn.Tanh.forward
    try:
        nn.Tanh.forward = lambda self, t: torch.sigmoid(t)  # type: ignore[method-assign]
        same(opt, model, x)
        assert backend.count == 2
    finally:
        nn.Tanh.forward = original  # type: ignore[method-assign]


class SumsParameters(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = x.sum() * 0
        for p in self.parameters():
            total = total + p.sum()
        for name, b in self.named_buffers():
            total = total + b.sum()
        return total


def test_a_parameter_added_after_compiling_is_seen_by_parameters() -> None:
    model, backend = SumsParameters(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 4)
    same(opt, model, x)
    text = guard_text(SumsParameters.forward.__code__)
    assert "DICT_KEYS: L['self']._parameters" in text
    model.b = nn.Parameter(torch.ones(3))
    same(opt, model, x)
    model.a.register_buffer("extra", torch.ones(2))
    same(opt, model, x)
    assert backend.count == 3


def test_parameters_iterated_come_from_the_reader_and_buffers_through_the_dicts() -> None:
    model, backend = SumsParameters(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 4)
    same(opt, model, x)
    code = entry_for(SumsParameters.forward.__code__).code
    assert "_buffers" in code.co_names and "_parameters" not in code.co_names
    assert len(reader_calls(code)) == 1
    assert "MODULE_PARAMS: L['self'] submodules=1 parameters=2" in guard_text(
        SumsParameters.forward.__code__
    )


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.b.weight = self.a.weight  # one parameter, two paths

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_untying_a_shared_parameter_gives_the_eager_result() -> None:
    model, backend = Tied(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model.b.weight = nn.Parameter(torch.randn(8, 8))  # untied: b reads its own weight now
    same(opt, model, x)
    assert backend.count == 2


def test_parameters_pin_their_identity_when_module_params_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reader hands over the objects the trace saw: where MODULE_PARAMS cannot be built,
    # each parameter it serves gets an ID_MATCH at its path instead (Output.guard_set).
    from guards import GuardSet, UnsupportedGuardValue

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedGuardValue("refused for this test")

    monkeypatch.setattr(GuardSet, "MODULE_PARAMS", refuse)
    model, backend = seq(2), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 8)
    same(opt, model, x)
    code = entry_for(nn.Sequential.forward.__code__).code
    assert len(reader_calls(code)) == 1
    text = guard_text(nn.Sequential.forward.__code__)
    assert "MODULE_PARAMS" not in text
    assert "ID_MATCH: L['self']._modules['1']._parameters['weight']" in text
    model[1].weight = nn.Parameter(torch.randn(8, 8))  # same metadata, another object
    same(opt, model, x)
    assert backend.count == 2


class ListOfTensors(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 3)
        self.items = [torch.randn(3), torch.randn(3), torch.randn(3)]  # a plain list attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 2 + self.items[0] * self.items[1]


def test_only_reader_tuples_are_spread_into_the_graph_call() -> None:
    # self.items[0], self.items[1] are items of a bound prefix (self.items): passing the whole
    # list (three tensors) would be wrong; the parameters' reader is spread.
    model, backend = ListOfTensors(), Counting()
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(2, 3)
    same(opt, model, x)
    same(opt, model, x + 1)
    assert backend.count == 1
    assert len(reader_calls(entry_for(ListOfTensors.forward.__code__).code)) == 1
