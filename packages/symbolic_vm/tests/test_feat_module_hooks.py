"""Forward hooks and pre-hooks of submodules called inside compiled code are traced into the
graph as ``nn.Module.__call__`` runs them, guarded by the hook dicts' keys and each hook's
identity; backward hooks and ``always_call`` hooks stay graph breaks.

Every model is compiled through compile_api with a counting backend and compared with eager on
the same inputs, after each change too.
"""

from __future__ import annotations

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


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.lin(x)))


def same(compiled: Callable[..., Any], eager: Callable[..., Any], *args: Any) -> None:
    torch.testing.assert_close(compiled(*args), eager(*args))


def compiled(model: nn.Module, fullgraph: bool = True) -> tuple[Any, Counting]:
    backend = Counting()
    return compile_api.compile(model, backend=backend, fullgraph=fullgraph), backend


def test_hooks_returning_none_run_and_the_graph_is_one() -> None:
    model = Net()
    seen: list[tuple[int, ...]] = []
    model.lin.register_forward_pre_hook(lambda mod, args: None)
    model.lin.register_forward_hook(lambda mod, args, out: None)
    model.act.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
    opt, backend = compiled(model)
    x = torch.randn(2, 8)
    got = opt(x)
    assert seen == [(2, 8)]  # the closed-over list was appended to by the compiled call
    torch.testing.assert_close(got, model(x))
    assert backend.count == 1


def test_pre_hook_replacing_args_and_hook_replacing_output() -> None:
    model = Net()
    model.lin.register_forward_pre_hook(lambda mod, args: args[0] * 2)  # not a tuple: wrapped
    model.act.register_forward_pre_hook(lambda mod, args: (args[0] - 0.5,))
    model.out.register_forward_hook(lambda mod, args, out: out + args[0].sum())
    opt, backend = compiled(model)
    for _ in range(2):
        same(opt, model, torch.randn(2, 8))
    assert backend.count == 1


def test_hooks_read_module_attributes_and_parameters() -> None:
    model = Net()
    model.lin.scale = 3.0  # type: ignore[assignment]
    model.lin.register_forward_hook(lambda mod, args, out: out * mod.scale + mod.bias)
    opt, backend = compiled(model)
    same(opt, model, torch.randn(2, 8))
    with torch.no_grad():
        model.lin.bias.add_(1.0)  # the parameter is a graph input: no recompile
    same(opt, model, torch.randn(2, 8))
    assert backend.count == 1


def test_hook_closing_over_python_state() -> None:
    model = Net()
    state = {"factor": 2.0}
    model.act.register_forward_hook(lambda mod, args, out: out * state["factor"])
    opt, backend = compiled(model)
    x = torch.randn(2, 8)
    same(opt, model, x)
    state["factor"] = 5.0  # a constant the trace read: recompiles with the new value
    same(opt, model, x)
    assert backend.count == 2


def test_with_kwargs_hooks_see_and_replace_kwargs() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return x * scale

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Scaled()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x, scale=2.0)

    model = Outer()

    def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (args[0] + 1,), {"scale": kwargs["scale"] * 3}

    def post(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        return out - kwargs["scale"]

    model.inner.register_forward_pre_hook(pre, with_kwargs=True)
    model.inner.register_forward_hook(post, with_kwargs=True)
    opt, backend = compiled(model)
    same(opt, model, torch.randn(3))
    assert backend.count == 1


def test_hook_added_after_the_first_compile_recompiles() -> None:
    model = Net()
    opt, backend = compiled(model)
    x = torch.randn(2, 8)
    same(opt, model, x)
    model.lin.register_forward_hook(lambda mod, args, out: out * 10)
    same(opt, model, x)
    assert backend.count == 2
    model.lin.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    same(opt, model, x)
    assert backend.count == 3


def test_hook_removed_recompiles_and_runs_without_it() -> None:
    model = Net()
    handle = model.lin.register_forward_hook(lambda mod, args, out: out * 10)
    opt, backend = compiled(model)
    x = torch.randn(2, 8)
    same(opt, model, x)
    handle.remove()
    same(opt, model, x)
    assert backend.count == 2


def test_a_hook_replaced_by_another_function_recompiles() -> None:
    model = Net()
    handle = model.lin.register_forward_hook(lambda mod, args, out: out * 10)
    opt, backend = compiled(model)
    x = torch.randn(2, 8)
    same(opt, model, x)
    (hook_id,) = model.lin._forward_hooks
    model.lin._forward_hooks[hook_id] = lambda mod, args, out: out * -1  # same key, new hook
    same(opt, model, x)
    assert backend.count == 2
    handle.remove()


def test_guards_name_the_hook_dicts_and_each_hook() -> None:
    model = Net()
    model.lin.register_forward_hook(lambda mod, args, out: out * 10)
    opt, _ = compiled(model)
    opt(torch.randn(2, 8))
    (entry,) = evalframe.cache_entries(Net.forward.__code__)[:1]
    text = str(entry.guard.compiled_guards.text)
    assert "DICT_KEYS: L['self']._modules['lin']._forward_hooks" in text
    assert "DICT_KEYS: L['self']._modules['lin']._forward_hooks_with_kwargs" in text
    assert "ID_MATCH: L['self']._modules['lin']._forward_hooks[" in text


def test_global_forward_hooks_are_inlined_and_guarded() -> None:
    model = Net()
    seen: list[str] = []

    def hook(mod: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        seen.append(type(mod).__name__)
        return out + 1

    def pre(mod: nn.Module, args: Any) -> Any:
        return (args[0] * 2,)

    handles = [
        nn.modules.module.register_module_forward_hook(hook),
        nn.modules.module.register_module_forward_pre_hook(pre),
    ]
    try:

        def run(x: torch.Tensor) -> torch.Tensor:
            return model(x)

        backend = Counting()
        opt = compile_api.compile(run, backend=backend, fullgraph=True)
        x = torch.randn(2, 8)
        got = opt(x)
        compiled_calls = list(seen)
        seen.clear()
        torch.testing.assert_close(got, run(x))
        assert compiled_calls == seen == ["Linear", "ReLU", "Linear", "Net"]
        assert backend.count == 1
        handles.pop().remove()  # the global pre-hook removed: recompiles
        same(opt, run, x)
        assert backend.count == 2
    finally:
        for handle in handles:
            handle.remove()
    same(opt, run, x)
    assert backend.count == 3


def test_a_print_inside_a_hook_breaks_and_gives_the_eager_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = Net()

    def loud(mod: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        print("hooked", tuple(out.shape))
        return out * 2

    model.lin.register_forward_hook(loud)
    opt, backend = compiled(model, fullgraph=False)
    x = torch.randn(2, 8)
    got = opt(x)
    assert capsys.readouterr().out == "hooked (2, 8)\n"
    torch.testing.assert_close(got, model(x))
    assert capsys.readouterr().out == "hooked (2, 8)\n"


def test_backward_hooks_stay_a_graph_break_with_the_eager_result() -> None:
    model = Net()
    grads: list[torch.Tensor] = []
    model.lin.register_full_backward_hook(lambda mod, gin, gout: grads.append(gout[0]))
    opt, backend = compiled(model, fullgraph=False)
    x = torch.randn(2, 8, requires_grad=True)
    opt(x).sum().backward()
    assert len(grads) == 1
    with pytest.raises(Exception, match="backward hooks registered"):
        compile_api.compile(Net_with_backward_hook(), backend=Counting(), fullgraph=True)(
            torch.randn(2, 8)
        )


def Net_with_backward_hook() -> Net:  # noqa: N802 -- reads as the model it builds
    model = Net()
    model.lin.register_full_backward_hook(lambda mod, gin, gout: None)
    return model


def test_always_call_hook_stays_a_graph_break_with_the_eager_result() -> None:
    model = Net()
    model.lin.register_forward_hook(lambda mod, args, out: out * 3, always_call=True)
    opt, _ = compiled(model, fullgraph=False)
    same(opt, model, torch.randn(2, 8))


def test_a_global_hook_added_after_compiling_a_locally_hooked_module_recompiles() -> None:
    model = Net()
    model.lin.register_forward_hook(lambda mod, args, out: out * 10)

    def run(x: torch.Tensor) -> torch.Tensor:  # no wrapper module (it would run global hooks too)
        return model.lin(x)  # only the hooked module: no "no global hooks" guard of another

    backend = Counting()
    opt = compile_api.compile(run, backend=backend, fullgraph=True)
    x = torch.randn(2, 8)
    same(opt, run, x)
    handle = nn.modules.module.register_module_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    try:
        same(opt, run, x)
    finally:
        handle.remove()
    assert backend.count == 2
    same(opt, run, x)
    assert backend.count == 2  # the first entry's guards hold again
