"""Shape facts a backend adds to the capture's ShapeEnv become guards of the compiled frame.

A backend that retraces the captured graph on its symbolic example inputs (aot's trace under
aot_eager and inductor) runs fake kernels that can specialise a size (``x[1:]`` at size 2 makes
a size-1 dim and the trace fixes the size to 2) or record a relation. A graph traced under
such a fact is valid only where it holds, so compile_api builds the frame's guards after the
backend ran: a call where a fact does not hold misses the cache and recompiles, as
torch.compile does. Every call is compared with eager on the same inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

import compile_api
import guards
import symbolic_vm


class Counting:
    """A named backend (or any backend), counting the graphs handed to it."""

    def __init__(self, backend: str | Callable[..., Any]) -> None:
        self.backend = compile_api.lookup_backend(backend) if isinstance(backend, str) else backend
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.count += 1
        return self.backend(gm, example_inputs)


def sweep(fn: Callable[..., Any], backend: Any, sizes: Sequence[int], **kw: Any) -> None:
    """Call the compiled ``fn`` on one (n, 4) tensor per size; each result must equal eager's."""
    compiled = compile_api.compile(fn, backend=backend, **kw)
    for n in sizes:
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), fn(x), msg=lambda m, n=n: f"size {n}: {m}")


def sliced_times_rows(x: torch.Tensor) -> torch.Tensor:
    # aot's trace of x[1:] at x.size(0) == 2 specialises the size to 2; the product then
    # holds the constant 2, so a graph traced at size 2 is wrong at any other size
    return x[1:].sum(0) * x.shape[0]


@pytest.fixture
def no_inductor_fallback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails the test if inductor_lite ran any graph eagerly (gave up, or refused the sizes)."""
    with caplog.at_level(logging.DEBUG, logger="strata.inductor_lite"):
        yield
    eager = [r.getMessage() for r in caplog.records
             if r.name.startswith("strata.inductor_lite") and "eagerly" in r.getMessage()]
    assert not eager, eager


# backend -> (compiles for dynamic=True over DYNAMIC_SIZES, for dynamic=None over AUTO_SIZES);
# eager adds no fact; aot's trace specialises at 2 (the counts torch.compile gives, see below)
EXPECTED = {"eager": (1, 2), "aot_eager": (2, 3), "inductor": (2, 3)}
DYNAMIC_SIZES = (2, 3, 5, 2, 3)  # the first compile at 2 specialises; 3 recompiles generally
AUTO_SIZES = (4, 2, 5, 3, 2)  # static at 4; dynamic at 2 specialises; 5 recompiles generally


@pytest.mark.parametrize("backend", sorted(EXPECTED))
def test_a_size_the_backend_specialised_recompiles_under_dynamic_true(
    backend: str, no_inductor_fallback: None
) -> None:
    counting = Counting(backend)
    sweep(sliced_times_rows, counting, DYNAMIC_SIZES, dynamic=True)
    assert counting.count == EXPECTED[backend][0]


@pytest.mark.parametrize("backend", sorted(EXPECTED))
def test_a_size_the_backend_specialised_recompiles_under_automatic_dynamic(
    backend: str, no_inductor_fallback: None
) -> None:
    counting = Counting(backend)
    sweep(sliced_times_rows, counting, AUTO_SIZES)  # dynamic=None
    assert counting.count == EXPECTED[backend][1]


def rolled_times_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[1:], x[:1]]) * x.shape[0]


def sliced_mean_times_rows(x: torch.Tensor) -> torch.Tensor:
    return x[1:].mean() * x.shape[0]


def sliced_from_two_times_rows(x: torch.Tensor) -> torch.Tensor:
    return x[2:].sum(0) * x.shape[0]  # specialised at size 3


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition"])
@pytest.mark.parametrize(("fn", "sizes"), [
    (rolled_times_rows, (2, 3, 4, 2, 5)),
    (sliced_mean_times_rows, (2, 3, 4, 2, 5)),
    (sliced_from_two_times_rows, (3, 4, 5, 3, 2)),
])
@pytest.mark.parametrize("dynamic", [True, None])
def test_graphs_traced_under_a_specialisation_never_run_at_other_sizes(
    backend: str, fn: Callable[..., Any], sizes: Sequence[int], dynamic: bool | None
) -> None:
    # each of these gave wrong results at some call before the guards were built after the
    # backend (the first size under dynamic=True, or the second under automatic dynamic,
    # specialises)
    auto_sizes = (sizes[1], *sizes)  # automatic dynamic: static first, then the sweep
    sweep(fn, Counting(backend), sizes if dynamic else auto_sizes, dynamic=dynamic)


def test_aot_eager_compile_counts_equal_torch_compile() -> None:
    from torch._dynamo.utils import counters

    for dynamic, sizes in ((True, DYNAMIC_SIZES), (None, AUTO_SIZES)):
        torch._dynamo.reset()
        counters.clear()
        reference = torch.compile(sliced_times_rows, backend="aot_eager", dynamic=dynamic)
        for n in sizes:
            x = torch.randn(n, 4)
            torch.testing.assert_close(reference(x), sliced_times_rows(x))
        counting = Counting("aot_eager")
        compile_api.reset()
        sweep(sliced_times_rows, counting, sizes, dynamic=dynamic)
        assert counting.count == counters["stats"]["unique_graphs"], dynamic
    torch._dynamo.reset()


def test_the_specialisation_is_the_recompile_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="strata.recompiles"):
        sweep(sliced_times_rows, Counting("aot_eager"), (2, 3), dynamic=True)
    reasons = "\n".join(r.getMessage() for r in caplog.records if r.name == "strata.recompiles")
    assert "L['x'].size(0)" in reasons and "2" in reasons, reasons


def test_inductor_readme_example_compiles_the_second_size_instead_of_running_eagerly(
    no_inductor_fallback: None,
) -> None:
    # the inductor_lite README's example: at size 2, x[1:] has a size-1 dim and aot's trace
    # specialises; size 3 used to be refused by the per-call check and run eagerly
    def f(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        t = x.t() + 1
        return t[:, 1:].sum(1) + b.unsqueeze(0).expand(x.shape[1], -1).mean(0).sum() + x[1:].max()

    counting = Counting("inductor")
    compiled = compile_api.compile(f, backend=counting, dynamic=True)
    for n in (2, 3, 17, 2, 5):
        x, b = torch.randn(n, n + 2), torch.randn(n)
        torch.testing.assert_close(compiled(x, b), f(x, b))
    assert counting.count == 2


def sliced_after_a_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    compile_api.graph_break()
    return y[1:].sum(0) * y.shape[0]  # specialised in the resume function's graph


@pytest.mark.parametrize(("dynamic", "sizes", "compiles"), [
    (True, DYNAMIC_SIZES, 3),  # the frame's graph once, the resume function's twice
    (None, AUTO_SIZES, 5),  # frame: static, dynamic; resume: static, dynamic at 2, dynamic
])
def test_a_specialisation_in_a_resume_functions_graph_is_guarded(
    dynamic: bool | None, sizes: Sequence[int], compiles: int
) -> None:
    # the counts torch.compile gives for the same function (with print() as the break)
    counting = Counting("aot_eager")
    sweep(sliced_after_a_break, counting, sizes, dynamic=dynamic)
    assert counting.count == compiles


# -- backends that add facts themselves (no aot): the mechanism, independent of aot's trace ----


def _first_fake(gm: torch.fx.GraphModule) -> Any:
    """The symbolic example value of the graph's first placeholder (the capture's fake tensor)."""
    return next(n for n in gm.graph.nodes if n.op == "placeholder").meta["example_value"]


def times_rows(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0]


def specialising_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """Reads the row count as a Python int (the ShapeEnv fixes it) and bakes it in."""
    rows = int(_first_fake(gm).shape[0])

    def run(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * rows,)

    return run


def test_a_size_a_backend_read_as_an_int_is_guarded() -> None:
    counting = Counting(specialising_backend)
    sweep(times_rows, counting, (3, 4, 3, 6, 4), dynamic=True)
    assert counting.count == 3  # one graph per distinct size, each guarded on its own


def relation_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """Chooses an implementation by a relation on the rows (the ShapeEnv records it).

    Over 4 rows it runs code that assumes at least 5 rows (it scales by ``max(rows, 5)``), right
    only where the relation holds; otherwise the graph as captured.
    """
    if _first_fake(gm).shape[0] > 4:

        def at_least_five_rows(x: torch.Tensor) -> tuple[torch.Tensor]:
            return (x * max(x.shape[0], 5),)

        return at_least_five_rows
    return gm.forward


def test_a_relation_a_backend_relied_on_is_guarded() -> None:
    counting = Counting(relation_backend)
    compiled = compile_api.compile(times_rows, backend=counting, dynamic=True)
    x = torch.randn(6, 4)
    torch.testing.assert_close(compiled(x), times_rows(x))
    for n in (9, 5, 30):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), times_rows(x))
    assert counting.count == 1, "every size over 4 satisfies the relation"
    x = torch.randn(4, 4)
    torch.testing.assert_close(compiled(x), times_rows(x))
    assert counting.count == 2, "4 rows break the relation: recompile"
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), times_rows(x))
    assert counting.count == 2, "2 rows satisfy the second entry's relation (at most 4)"


def test_the_eager_backend_adds_no_guard_and_compiles_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting = Counting("eager")
    with caplog.at_level(logging.DEBUG, logger="strata.guards"):
        sweep(sliced_times_rows, counting, (2, 3, 5, 9), dynamic=True)
    assert counting.count == 1
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "strata.guards")
    assert "L['x'].size(0) == 2" not in text


def test_rebuilt_guards_hold_a_fact_added_after_the_capture_and_the_first_set_does_not() -> None:
    frame = symbolic_vm.frame_from_call(times_rows, (torch.ones(3, 2),))
    result = symbolic_vm.capture(frame, symbolic_vm.CaptureConfig(dynamic=True))
    as_captured = guards.compile_guards(result.guards, frame.f_globals)
    int(_first_fake(result.graphs[0].gm).shape[0])  # what a backend may do: fixes the size
    rebuilt = guards.compile_guards(result.rebuild_guards(), frame.f_globals)
    three, five = {"x": torch.ones(3, 2)}, {"x": torch.ones(5, 2)}
    assert as_captured(three) and as_captured(five)
    assert rebuilt(three) and not rebuilt(five)
    assert any("L['x'].size(0) == 3" in reason for reason in rebuilt.failures(five))


def test_rebuilt_guards_keep_the_global_state_and_tensor_metadata_of_frame_entry() -> None:
    # Only shape facts are new: what else the guards check was read when the frame started,
    # whatever a backend did meanwhile.
    x = torch.ones(3, 2)
    frame = symbolic_vm.frame_from_call(times_rows, (x,))
    result = symbolic_vm.capture(frame, symbolic_vm.CaptureConfig(dynamic=True))
    with torch.no_grad():
        x.requires_grad_(True)
        rebuilt = guards.compile_guards(result.rebuild_guards(), frame.f_globals)
        x.requires_grad_(False)
    assert torch.is_grad_enabled()
    assert rebuilt({"x": torch.ones(4, 2)}), rebuilt.failures({"x": torch.ones(4, 2)})
    assert not rebuilt({"x": torch.ones(4, 2, requires_grad=True)})
