"""compile_api over every layer: capture, guards, recompiles, errors -- compared with eager."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch

import compile_api


def toy_fullgraph(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    return x * b.sum()


def test_fullgraph_capture_matches_eager_and_caches(counter: Any) -> None:
    fn = compile_api.compile(toy_fullgraph, fullgraph=True, backend=counter)
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))
    assert counter.count == 1
    a2, b2 = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(fn(a2, b2), toy_fullgraph(a2, b2))
    assert counter.count == 1, "same shapes must hit the cache"


def test_graph_nodes_are_named_like_the_torchdynamo_readme(counter: Any) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = a / (torch.abs(a) + 1)
        return x, b.sum() < 0

    compile_api.compile(f, fullgraph=True, backend=counter)(torch.randn(4), torch.randn(4))
    names = [n.name for n in counter.graphs[0].graph.nodes]
    assert names == ["a", "b", "abs_1", "add", "truediv", "sum_1", "lt", "output"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_module_compiles_with_each_backend(backend: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = compile_api.compile(model, backend=backend)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
    # torch defines nn.Sequential.forward: it must be compiled all the same, into one graph.
    assert len(compile_api.compile_times(repr="dict")["backend_compile"]) == 1


def test_compiled_graphs_run_with_the_hook_off() -> None:
    # Regression: a backend's generated Python (here an FX forward with a Python helper) was
    # itself compiled when it ran under the hook, recursing through the backend.
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen.append(gm.__class__.__name__)

        def run(*args: Any) -> Any:
            return helper_in_backend(gm, args)

        return run

    fn = compile_api.compile(toy_fullgraph, backend=backend)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))
    assert len(seen) == 1


def helper_in_backend(gm: torch.fx.GraphModule, args: Any) -> Any:
    return gm.forward(*args)


def test_shape_change_recompiles_and_logs_the_reason(
    counter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fn = compile_api.compile(toy_fullgraph, backend=counter, dynamic=False)
    fn(torch.randn(3), torch.randn(3))
    with caplog.at_level(logging.DEBUG, logger="strata.recompiles"):
        out = fn(torch.ones(4), torch.ones(4))
    torch.testing.assert_close(out, toy_fullgraph(torch.ones(4), torch.ones(4)))
    assert counter.count == 2
    assert "Recompiling toy_fullgraph" in caplog.text
    assert "size" in caplog.text


def test_automatic_dynamic_stops_recompiling_after_the_second_size(counter: Any) -> None:
    fn = compile_api.compile(toy_fullgraph, backend=counter)  # dynamic=None
    for n in (3, 4, 5, 6, 7):
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))
    assert counter.count == 2


def test_dynamic_true_compiles_once_for_a_sweep_of_sizes(counter: Any) -> None:
    fn = compile_api.compile(toy_fullgraph, backend=counter, dynamic=True)
    for n in (3, 4, 5, 9):
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))
    assert counter.count == 1


def test_cache_size_limit_warns_once_and_runs_eagerly(counter: Any) -> None:
    compile_api.config.cache_size_limit = 2
    fn = compile_api.compile(toy_fullgraph, backend=counter, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (2, 3, 4, 5, 6):
            a, b = torch.randn(n), torch.randn(n)
            torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))
    assert counter.count == 2
    limit_warnings = [w for w in caught if "cache_size_limit" in str(w.message)]
    assert len(limit_warnings) == 1


def test_failing_backend_warns_and_runs_eagerly() -> None:
    def broken(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        raise RuntimeError("backend exploded")

    fn = compile_api.compile(toy_fullgraph, backend=broken)
    a, b = torch.randn(5), torch.randn(5)
    with pytest.warns(RuntimeWarning, match="backend exploded"):
        out = fn(a, b)
    torch.testing.assert_close(out, toy_fullgraph(a, b))
    torch.testing.assert_close(fn(a, b), toy_fullgraph(a, b))  # the next call works too


def test_failing_backend_raises_without_suppress_errors() -> None:
    compile_api.config.suppress_errors = False

    def broken(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        raise RuntimeError("backend exploded")

    fn = compile_api.compile(toy_fullgraph, backend=broken)
    with pytest.raises(compile_api.BackendCompilerFailed, match="backend exploded"):
        fn(torch.randn(5), torch.randn(5))


def test_fullgraph_unsupported_names_the_users_file_and_line() -> None:
    def uses_print(x: torch.Tensor) -> torch.Tensor:
        print("side effect")
        return x + 1

    fn = compile_api.compile(uses_print, fullgraph=True, backend="eager")
    with pytest.raises(compile_api.Unsupported) as err:
        fn(torch.randn(2))
    assert "test_e2e_compile.py" in str(err.value)
    assert "print" in str(err.value)


def test_disable_runs_the_function_uncompiled(counter: Any) -> None:
    @compile_api.disable
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    fn = compile_api.compile(helper, backend=counter)
    torch.testing.assert_close(fn(torch.ones(2)), torch.ones(2) * 3)
    assert counter.count == 0


def test_run_uses_cached_code_and_never_compiles(counter: Any) -> None:
    fn = compile_api.compile(toy_fullgraph, backend=counter, dynamic=False)
    fn(torch.randn(3), torch.randn(3))
    assert counter.count == 1
    cached_only = compile_api.run(fn)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(cached_only(a, b), toy_fullgraph(a, b))
    assert counter.count == 1


def test_compile_profiler_reports_graphs() -> None:
    prof = compile_api.CompileProfiler()
    fn = compile_api.compile(toy_fullgraph, backend=prof)
    fn(torch.randn(3), torch.randn(3))
    report = prof.report()
    assert "graphs: 1" in report
    times = compile_api.compile_times(repr="dict")
    assert len(times["bytecode_analysis"]) == 1 and len(times["guard_building"]) == 1


def test_guards_and_graph_code_logs(caplog: pytest.LogCaptureFixture) -> None:
    compile_api.set_logs(guards=True, graph_code=True, bytecode=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="strata"):
            compile_api.compile(toy_fullgraph, backend="eager")(torch.randn(3), torch.randn(3))
    finally:
        compile_api.set_logs(guards=False, graph_code=False, bytecode=False)
    assert "TENSOR_MATCH" in caplog.text
    assert "def forward" in caplog.text
    assert "MODIFIED BYTECODE" in caplog.text


def test_optimize_as_decorator_and_as_context_manager(counter: Any) -> None:
    decorated = compile_api.optimize(counter)(toy_fullgraph)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(decorated(a, b), toy_fullgraph(a, b))
    assert counter.count == 1
    compile_api.reset()

    def caller(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return toy_fullgraph(a, b) + 1

    with compile_api.optimize(counter):
        out = caller(a, b)  # caller's frame is hooked because it starts inside the block
    torch.testing.assert_close(out, toy_fullgraph(a, b) + 1)
    assert counter.count == 2


def test_optimize_nopython_raises_unsupported() -> None:
    def uses_print(x: torch.Tensor) -> torch.Tensor:
        print("side effect")
        return x + 1

    with pytest.raises(compile_api.Unsupported):
        compile_api.optimize("eager", nopython=True)(uses_print)(torch.randn(2))


def test_debug_function_compiles_only_functions_of_that_name(counter: Any) -> None:
    compile_api.config.debug_function = "toy_fullgraph"

    def other(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    torch.testing.assert_close(
        compile_api.compile(other, backend=counter)(torch.ones(2)), torch.ones(2) * 2
    )
    assert counter.count == 0
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(
        compile_api.compile(toy_fullgraph, backend=counter)(a, b), toy_fullgraph(a, b)
    )
    assert counter.count == 1


def test_config_debug_prints_graph_bytecode_and_guards(
    counter: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    compile_api.config.debug = True
    compile_api.compile(toy_fullgraph, backend=counter)(torch.randn(3), torch.randn(3))
    out = capsys.readouterr().out
    assert "def forward" in out
    assert "ORIGINAL BYTECODE" in out and "MODIFIED BYTECODE" in out
    assert "GUARDS:" in out and "TENSOR_MATCH" in out


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_step_with_an_sgd_update_under_no_grad(backend: str) -> None:
    # forward, backward (a graph break), then the in-place update of the leaf parameters under
    # no_grad, compiled in the resume function: aot copies the new values back with grad off
    def make(model: torch.nn.Module) -> Any:
        params = list(model.parameters())

        def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            for p in params:
                p.grad = None
            loss = ((model(x) - t) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.sub_(0.1 * p.grad)
            return loss

        return step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref.load_state_dict(model.state_dict())
    compiled, eager = compile_api.compile(make(model), backend=backend), make(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to eager with a warning
        for _ in range(3):
            x, t = torch.randn(5, 8), torch.randn(5, 4)
            torch.testing.assert_close(compiled(x, t), eager(x, t))
            for p, q in zip(model.parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p, q)
                assert p.is_leaf
