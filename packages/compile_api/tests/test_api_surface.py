"""The torch.compile surface: same errors for the same misuse, decorator and module forms."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import compile_api


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "default", "options": {}},
        {"mode": "bogus"},
    ],
)
def test_bad_arguments_raise_what_torch_compile_raises(kwargs: dict[str, Any]) -> None:
    with pytest.raises(Exception) as theirs:
        torch.compile(lambda x: x, **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        compile_api.compile(lambda x: x, **kwargs)
    assert str(ours.value).split(",")[0] == str(theirs.value).split(",")[0]


def test_compiling_a_non_callable_raises_like_torch_compile() -> None:
    with pytest.raises(AssertionError):
        torch.compile(1)  # type: ignore[call-overload]
    with pytest.raises(AssertionError, match="callable"):
        compile_api.compile(1)
    with pytest.raises(TypeError):  # also a TypeError, which is what it really is
        compile_api.compile(1)


def test_unknown_backend_is_a_runtime_error_like_torch() -> None:
    with pytest.raises(RuntimeError):
        torch.compile(lambda x: x, backend="no-such-backend")
    with pytest.raises(RuntimeError, match="no-such-backend"):
        compile_api.compile(lambda x: x, backend="no-such-backend")


def test_backend_registry() -> None:
    for name in ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor"):
        assert name in compile_api.list_backends()

    def my_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return gm.forward

    compile_api.register_backend(my_backend)
    assert "my_backend" in compile_api.list_backends()
    assert compile_api.lookup_backend("my_backend") is my_backend
    with pytest.raises(ValueError, match="already registered"):
        compile_api.register_backend(lambda gm, ex: gm, name="my_backend")
    with pytest.raises(TypeError):
        compile_api.register_backend(3, name="three")  # type: ignore[arg-type]


def test_decorator_forms_keep_the_function_name() -> None:
    @compile_api.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @compile_api.compile(fullgraph=True, backend="eager")
    def g(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert f.__name__ == "f" and g.__name__ == "g"


def test_disable_true_returns_the_model_itself() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x

    assert compile_api.compile(f, disable=True) is f


def test_compiled_module_forwards_attributes_parameters_and_state_dict() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    model.custom = "hello"  # type: ignore[assignment]
    opt = compile_api.compile(model, backend="eager")
    assert isinstance(opt, torch.nn.Module)
    assert opt._orig_mod is model
    assert opt.custom == "hello"
    assert list(opt.state_dict()) == list(model.state_dict())
    assert [p is q for p, q in zip(opt.parameters(), model.parameters())] == [True, True]
    opt.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert torch.count_nonzero(model[0].weight) == 0
    opt.eval()
    assert model.training is False


def test_mark_dynamic_validates_its_dimension() -> None:
    t = torch.randn(2, 3)
    compile_api.mark_dynamic(t, 1)
    assert t._strata_dynamic_dims == {1}  # type: ignore[attr-defined]
    with pytest.raises(IndexError):
        compile_api.mark_dynamic(t, 2)
    with pytest.raises(TypeError):
        compile_api.mark_dynamic([1, 2], 0)  # type: ignore[arg-type]


def test_compile_times_has_every_phase() -> None:
    times = compile_api.compile_times(repr="dict")
    assert set(times) == {"bytecode_analysis", "guard_building", "backend_compile"}
    assert "bytecode_analysis" in compile_api.compile_times()


def test_options_configure_inductor_lite_and_unknown_keys_are_rejected() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 + 1)

    x = torch.randn(64, 32)
    compiled = compile_api.compile(f, options={"num_threads": 1, "fallback": "raise"})
    torch.testing.assert_close(compiled(x), f(x))
    # The options really reach inductor_lite: a compiler that does not exist, with fallback
    # "raise", fails the backend (compile_api then warns and runs the graph as captured).
    compile_api.reset()
    broken = compile_api.compile(
        f, options={"cxx": "/nonexistent/strata-c++", "fallback": "raise", "cflags": ("-O1",)}
    )
    with pytest.warns(RuntimeWarning, match="failed on a graph"):
        torch.testing.assert_close(broken(x), f(x))
    with pytest.raises(RuntimeError, match="no_such_option"):
        compile_api.compile(f, options={"no_such_option": 1})
    with pytest.raises(RuntimeError, match="inductor"):
        compile_api.compile(f, backend="eager", options={"num_threads": 1})


def _module_class() -> type[torch.nn.Module]:
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu() + 1

    return Scaled


def test_compiling_a_module_class_compiles_its_instances_calls_as_torch() -> None:
    # torch.compile(cls) returns the class, its __call__/_call_impl compiled in place
    import torch._dynamo

    x = torch.randn(2, 3)
    counts = []
    for compiler in (compile_api.compile, torch.compile):
        graphs: list[torch.fx.GraphModule] = []

        def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            graphs.append(gm)  # noqa: B023 - called before the loop moves on
            return gm.forward

        torch._dynamo.reset()
        cls = _module_class()
        assert compiler(cls, backend=backend) is cls  # type: ignore[operator]
        torch.manual_seed(0)
        module = cls()
        torch.manual_seed(0)
        expected = _module_class()()(x)
        torch.testing.assert_close(module(x), expected)
        counts.append(len(graphs))
    torch._dynamo.reset()
    assert counts == [1, 1]
