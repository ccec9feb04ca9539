"""One code object compiled by several ``compile()`` calls: each context runs its own entries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api
import symbolic_vm


class Counting:
    """A backend that counts compiles and calls of what it compiled."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self.compiles = 0
        self.calls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.compiles += 1

        def run(*args: Any) -> Any:
            self.calls += 1
            return gm.forward(*args)

        return run


def sin_plus_one(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def test_a_second_backend_compiles_its_own_entry_and_each_runs_its_own() -> None:
    a, b = Counting("a"), Counting("b")
    fa = compile_api.compile(sin_plus_one, backend=a)
    fb = compile_api.compile(sin_plus_one, backend=b)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(fa(x), x.sin() + 1)
        torch.testing.assert_close(fb(x), x.sin() + 1)
    assert (a.compiles, b.compiles) == (1, 1)
    assert (a.calls, b.calls) == (3, 3)


def test_compile_calls_that_agree_share_one_cache() -> None:
    a = Counting("a")
    x = torch.randn(5)
    for _ in range(4):
        # A common mistake: compile() inside a loop. Same backend, fullgraph and dynamic:
        # the entry compiled by the first call serves the others.
        torch.testing.assert_close(compile_api.compile(sin_plus_one, backend=a)(x), x.sin() + 1)
    assert a.compiles == 1
    assert a.calls == 4


def test_same_backend_with_other_dynamic_setting_compiles_again() -> None:
    a = Counting("a")
    x = torch.randn(5)
    compile_api.compile(sin_plus_one, backend=a, dynamic=False)(x)
    compile_api.compile(sin_plus_one, backend=a, dynamic=True)(x)
    assert a.compiles == 2


def breaks_once(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("a graph break", end="")
    return y + 1


def test_fullgraph_never_reuses_an_entry_compiled_with_graph_breaks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    a = Counting("a")
    x = torch.randn(3)
    torch.testing.assert_close(compile_api.compile(breaks_once, backend=a)(x), x * 2 + 1)
    with pytest.raises(symbolic_vm.Unsupported):
        compile_api.compile(breaks_once, backend=a, fullgraph=True)(x)
    capsys.readouterr()


def test_run_runs_entries_of_any_context_and_compiles_nothing() -> None:
    a, b = Counting("a"), Counting("b")
    x = torch.randn(5)
    compile_api.compile(sin_plus_one, backend=a)(x)
    runner = compile_api.run(sin_plus_one)
    torch.testing.assert_close(runner(x), x.sin() + 1)
    assert a.calls == 2
    with compile_api.run():
        torch.testing.assert_close(sin_plus_one(x), x.sin() + 1)
    assert a.calls == 3
    # A size nothing was compiled for runs eagerly, compiling nothing.
    y = torch.randn(7)
    torch.testing.assert_close(runner(y), y.sin() + 1)
    assert a.calls == 3
    assert (a.compiles, b.compiles) == (1, 0)


def test_optimize_context_managers_with_two_backends_keep_apart() -> None:
    a, b = Counting("a"), Counting("b")
    x = torch.randn(4)
    for _ in range(2):
        with compile_api.optimize(a):
            torch.testing.assert_close(sin_plus_one(x), x.sin() + 1)
        with compile_api.optimize(b):
            torch.testing.assert_close(sin_plus_one(x), x.sin() + 1)
    assert (a.compiles, b.compiles) == (1, 1)
    assert (a.calls, b.calls) == (2, 2)


def inner(x: torch.Tensor) -> torch.Tensor:
    return x.cos() * 3


def test_a_compiled_function_called_from_another_context_keeps_its_backend() -> None:
    a, b = Counting("a"), Counting("b")
    compiled_inner = compile_api.compile(inner, backend=b)

    def outer(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        compile_api.graph_break()
        return compiled_inner(y) - 1

    compiled_outer = compile_api.compile(outer, backend=a)
    x = torch.randn(6)
    for _ in range(2):
        torch.testing.assert_close(compiled_outer(x), (x + 1).cos() * 3 - 1)
    # inner's frame was compiled by b (its own compile()), never by a.
    assert b.compiles == 1
    assert b.calls == 2
    # The token of the outer context is back after the inner call: a's entries still hit.
    compiles = a.compiles
    compiled_outer(x)
    assert a.compiles == compiles


def test_threads_running_two_contexts_at_once_get_their_own_entries() -> None:
    a, b = Counting("a"), Counting("b")
    fa = compile_api.compile(sin_plus_one, backend=a)
    fb = compile_api.compile(sin_plus_one, backend=b)
    x = torch.randn(5)
    fa(x)
    fb(x)
    errors: list[BaseException] = []

    def loop(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        try:
            for _ in range(200):
                torch.testing.assert_close(fn(x), x.sin() + 1)
        except BaseException as err:  # reported to the main thread
            errors.append(err)

    threads = [threading.Thread(target=loop, args=(fn,)) for fn in (fa, fb, fa, fb)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (a.compiles, b.compiles) == (1, 1)
    assert (a.calls, b.calls) == (401, 401)


def test_recompile_reason_names_the_other_context(caplog: pytest.LogCaptureFixture) -> None:
    a, b = Counting("a"), Counting("b")
    x = torch.randn(5)
    compile_api.compile(sin_plus_one, backend=a)(x)
    compile_api.set_logs(recompiles=True)
    try:
        with caplog.at_level("DEBUG"):
            compile_api.compile(sin_plus_one, backend=b)(x)
    finally:
        compile_api.set_logs(recompiles=False)
    assert "compiled by compile(backend='a'" in caplog.text


# --- OptimizedModule's direct route and its ordinary route ----------------------------------


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_compiled_module_hooks_on_the_wrapper_and_the_module_run_like_eager() -> None:
    model = _model()
    compiled = compile_api.compile(model, backend=Counting("a"))
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    calls: list[str] = []
    h1 = compiled.register_forward_hook(lambda m, i, o: calls.append("wrapper") or o * 2)
    torch.testing.assert_close(compiled(x), model(x) * 2)
    h1.remove()
    h2 = model.register_forward_pre_hook(lambda m, i: (i[0] + 1,))
    torch.testing.assert_close(compiled(x), model(x))  # both see the pre-hook
    h2.remove()
    h3 = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: calls.append(type(m).__name__)
    )
    try:
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        h3.remove()
    assert calls[0] == "wrapper" and "Sequential" in calls
    torch.testing.assert_close(compiled(x), model(x))


def test_compiled_module_follows_a_forward_replaced_on_the_instance() -> None:
    model = _model()
    compiled = compile_api.compile(model, backend="eager")
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    original = type(model).forward
    model.forward = lambda inp: original(model, inp) * 5  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), original(model, x) * 5)


def test_a_deepcopy_of_a_compiled_module_runs_its_own_parameters() -> None:
    import copy

    model = _model()
    compiled = compile_api.compile(model, backend="eager")
    x = torch.randn(3, 4)
    compiled(x)
    clone = copy.deepcopy(compiled)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(1.0)
    torch.testing.assert_close(clone(x), clone._orig_mod(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert not torch.allclose(clone(x), compiled(x))
    # The ordinary route (a hook on the clone) runs the clone's module too.
    handle = clone.register_forward_pre_hook(lambda m, i: None)
    torch.testing.assert_close(clone(x), clone._orig_mod(x))
    handle.remove()


def test_an_unhashable_backend_object_works() -> None:
    class Unhashable(Counting):
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Unhashable)

    backend = Unhashable("u")
    x = torch.randn(3)
    for _ in range(2):
        compiled = compile_api.compile(sin_plus_one, backend=backend)
        torch.testing.assert_close(compiled(x), x.sin() + 1)
    assert backend.compiles == 1
