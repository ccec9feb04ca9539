"""Dynamic shapes through compile_api: compile counts over size sweeps, compared with eager.

Int arguments follow the same modes (as SymInt graph inputs; under dynamic=True 0 and 1 too),
and module parameters/buffers keep static sizes under dynamic=True.

dynamic=False specialises every size; dynamic=True makes sizes symbolic from the first
compile (0 and 1 stay specialised); dynamic=None compiles static first and then once more with
the changed dimension symbolic; mark_dynamic makes a dim symbolic up front; relations the
trace relied on (equal sizes, branches on a size) are guarded.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import pytest
import torch

import compile_api
import inductor_lite


def same(compiled: Any, eager: Any, *args: Any) -> Any:
    got = compiled(*args)
    torch.testing.assert_close(got, eager(*args))
    return got


def row_norm(x: torch.Tensor) -> torch.Tensor:
    return x / (x.abs().sum(dim=-1, keepdim=True) + 1) * x.shape[0]


SWEEP = (3, 4, 5, 8, 17)


def test_static_recompiles_for_every_size(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    for n in SWEEP:
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == len(SWEEP)
    for n in SWEEP:  # each size hits its own entry
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == len(SWEEP)


def test_dynamic_true_compiles_once_for_a_sweep(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    for n in SWEEP:
        same(fn, row_norm, torch.randn(n, 7 + n))
    assert counter.count == 1


def pad_nothing(x: torch.Tensor) -> torch.Tensor:
    # timm's Swin pads each window stage by (window - H % window) % window: zero when divisible
    return torch.nn.functional.pad(x * 2, (0, 0, 0, 0, 0, 0)) + 1


def test_dynamic_true_keeps_the_batch_symbolic_through_a_zero_pad(counter: Any) -> None:
    # F.pad's C++ composite reads concrete sizes on fake tensors and pinned the batch to its
    # first value (2 graphs for timm's Swin); the Python dispatcher's decomposition does not.
    fn = compile_api.compile(pad_nothing, backend=counter, dynamic=True)
    for n in SWEEP:
        same(fn, pad_nothing, torch.randn(n, 4, 4, 3))
    assert counter.count == 1


@pytest.mark.parametrize("special", [0, 1])
def test_dynamic_true_specialises_zero_and_one(counter: Any, special: int) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    same(fn, row_norm, torch.randn(4, 6))
    same(fn, row_norm, torch.randn(special, 6))
    assert counter.count == 2, f"size {special} gets its own (static) entry"
    same(fn, row_norm, torch.randn(9, 6))
    assert counter.count == 2


def test_automatic_dynamic_compiles_twice_then_generalises(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter)  # dynamic=None
    same(fn, row_norm, torch.randn(3, 6))
    assert counter.count == 1
    same(fn, row_norm, torch.randn(4, 6))
    assert counter.count == 2
    for n in (5, 8, 17):
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count == 2, "a third size must not recompile"
    # The first, static graph has no symbolic placeholder; the second has one.
    assert not any(n.op == "placeholder" and _is_sym(n) for n in counter.graphs[0].graph.nodes)


def _is_sym(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in value.shape)
    return False


def test_automatic_dynamic_only_generalises_the_dim_that_changed(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter)
    same(fn, row_norm, torch.randn(3, 6))
    same(fn, row_norm, torch.randn(4, 6))
    same(fn, row_norm, torch.randn(5, 6))
    assert counter.count == 2
    same(fn, row_norm, torch.randn(5, 9))  # dim 1 was static: recompile
    assert counter.count == 3


def test_mark_dynamic_compiles_once(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    for n in SWEEP:
        x = torch.randn(n, 6)
        compile_api.mark_dynamic(x, 0)
        same(fn, row_norm, x)
    assert counter.count == 1


def test_mark_dynamic_leaves_other_dims_static(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=False)
    x = torch.randn(4, 6)
    compile_api.mark_dynamic(x, 0)
    same(fn, row_norm, x)
    y = torch.randn(4, 7)
    compile_api.mark_dynamic(y, 0)
    same(fn, row_norm, y)
    assert counter.count == 2


def add_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b * 2


def test_relation_between_inputs_is_guarded(counter: Any) -> None:
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    same(fn, add_pair, torch.randn(7), torch.randn(7))
    assert counter.count == 1
    # Broadcasting: sizes that were equal in the trace now differ; the old entry must not run.
    same(fn, add_pair, torch.randn(5), torch.randn(1))
    assert counter.count == 2


def test_mismatched_sizes_raise_like_eager(counter: Any) -> None:
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    with pytest.raises(RuntimeError):
        add_pair(torch.randn(4), torch.randn(5))
    with pytest.raises(RuntimeError):
        fn(torch.randn(4), torch.randn(5))


def branchy(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_branch_on_a_size_is_guarded(counter: Any) -> None:
    fn = compile_api.compile(branchy, backend=counter, dynamic=True)
    for n in (5, 6, 9):
        same(fn, branchy, torch.randn(n))
    assert counter.count == 1
    for n in (2, 3, 4):
        same(fn, branchy, torch.randn(n))
    assert counter.count == 2, "the other side of the branch: one more entry"
    same(fn, branchy, torch.randn(12))
    same(fn, branchy, torch.randn(3))
    assert counter.count == 2


def test_automatic_dynamic_branch_on_a_size(counter: Any) -> None:
    fn = compile_api.compile(branchy, backend=counter)
    for n in (5, 6, 7, 2, 3, 8, 4):
        same(fn, branchy, torch.randn(n))
    # 5: static; 6: dynamic (x > 4); 2: dynamic (x <= 4); the rest hit.
    assert counter.count == 3


def reshape_half(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(2, x.shape[0] // 2) + 1


def test_symbolic_arithmetic_on_sizes(counter: Any) -> None:
    fn = compile_api.compile(reshape_half, backend=counter, dynamic=True)
    for n in (4, 6, 10, 32):
        same(fn, reshape_half, torch.randn(n))
    assert counter.count == 1


def head_by_round(x: torch.Tensor) -> torch.Tensor:
    return x[: round(x.shape[0] * 0.4)] * 2


def upsampled(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.interpolate(x[None, None], scale_factor=1.5)[0, 0] + 1


@pytest.mark.parametrize("fn", [head_by_round, upsampled], ids=["round", "interpolate"])
def test_sizes_computed_through_a_float_compile_once_like_torch_compile(
    counter: Any, fn: Any
) -> None:
    # their shape guards hold round(...)/floor(...) of a float: the guard renderer refused
    # them, and the frame ran eagerly with an internal error
    compile_api.config.suppress_errors = False
    ours = compile_api.compile(fn, backend=counter, dynamic=True)
    torch._dynamo.reset()
    theirs_count = []
    theirs = torch.compile(
        fn, backend=lambda gm, ex: (theirs_count.append(gm), gm)[1], dynamic=True
    )
    for n in (4, 6, 9, 13):
        same(ours, fn, torch.randn(n))
        same(theirs, fn, torch.randn(n))
    torch._dynamo.reset()
    assert counter.count == len(theirs_count) == 1


class Window:
    """A sliding-window cache's counter, as transformers' DynamicSlidingWindowLayer keeps it."""

    def __init__(self) -> None:
        self.seen = 0


def window_offset(x: torch.Tensor, w: Window) -> torch.Tensor:
    w.seen += x.shape[0]
    return x * max(w.seen - 5 + 1, 0) + min(w.seen, 6, x.shape[0] * 3)


def test_max_and_min_of_symbolic_ints_stay_symbolic_like_torch_compile(counter: Any) -> None:
    # max() of a growing int attribute and a constant broke at every call ("max() over tensors
    # compares tensor data": Mistral's generate() compiled 26 frames where torch compiles 3)
    ours_w, eager_w, torch_w = Window(), Window(), Window()
    ours = compile_api.compile(window_offset, backend=counter)
    torch._dynamo.reset()
    theirs_graphs: list[Any] = []
    theirs = torch.compile(window_offset, backend=lambda gm, ex: (theirs_graphs.append(gm), gm)[1])
    for n in (2, 2, 3, 2, 4, 2, 2):
        x = torch.randn(n)
        want = window_offset(x, eager_w)
        torch.testing.assert_close(ours(x, ours_w), want)
        torch.testing.assert_close(theirs(x, torch_w), want)
    torch._dynamo.reset()
    assert counter.count == len(theirs_graphs)


def test_dynamic_non_contiguous_input_gives_eager_result(counter: Any) -> None:
    fn = compile_api.compile(row_norm, backend=counter, dynamic=True)
    for n in (4, 6):
        same(fn, row_norm, torch.randn(6, n).t())
        same(fn, row_norm, torch.randn(n, 6))
    assert counter.count <= 2


def test_failed_broadcast_under_dynamic_compiles_without_internal_error(counter: Any) -> None:
    compile_api.config.suppress_errors = False
    fn = compile_api.compile(add_pair, backend=counter, dynamic=True)
    same(fn, add_pair, torch.randn(4), torch.randn(4))
    with pytest.raises(RuntimeError) as info:
        fn(torch.randn(4), torch.randn(5))
    if isinstance(info.value, compile_api.InternalError):
        raise info.value
    assert "size of tensor a" in str(info.value)


def sum_pair(xs: list[torch.Tensor]) -> torch.Tensor:
    return xs[0] * 2 + xs[1]


def test_automatic_dynamic_reaches_tensors_inside_a_list(counter: Any) -> None:
    fn = compile_api.compile(sum_pair, backend=counter)
    for n in (3, 4, 5, 6):
        xs = [torch.randn(n), torch.randn(n)]
        same(fn, sum_pair, xs)
    assert counter.count == 2


def repeat_n(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + n


def test_automatic_dynamic_int_argument_compiles_twice(counter: Any) -> None:
    fn = compile_api.compile(repeat_n, backend=counter)
    x = torch.randn(4)
    for n in (2, 3, 5, 7):
        same(fn, repeat_n, x, n)
    assert counter.count == 2


# -- int arguments and parameters, compile counts side by side with torch.compile ---------------


def torch_compile_count(
    fn: Any, calls: list[tuple[Any, ...]], dynamic: bool | None
) -> tuple[int, list[torch.fx.GraphModule]]:
    """Graphs torch.compile (a counting eager backend) makes of ``fn`` over ``calls``."""
    import torch._dynamo

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    for args in calls:
        torch.testing.assert_close(compiled(*args), fn(*args))
    torch._dynamo.reset()
    return len(graphs), graphs


def strata_count(counter: Any, fn: Any, calls: list[tuple[Any, ...]], dynamic: bool | None) -> int:
    compiled = compile_api.compile(fn, backend=counter, dynamic=dynamic)
    for args in calls:
        same(compiled, fn, *args)
    return int(counter.count)


INT_SWEEP = (2, 3, 5, 7, 0, 1, -4, 100)


def int_calls(*values: int) -> list[tuple[Any, ...]]:
    x = torch.randn(4)
    return [(x, n) for n in values]


@pytest.mark.parametrize("values", [INT_SWEEP, (0, 1, 2, 3), (1, 0, 1, 0), (2, 1, 5, 0, 7)])
@pytest.mark.parametrize("dynamic", [None, True])
def test_int_sweep_compile_count_equals_torch_compile(
    counter: Any, dynamic: Any, values: tuple[int, ...]
) -> None:
    calls = int_calls(*values)
    expected, _ = torch_compile_count(repeat_n, calls, dynamic)
    assert strata_count(counter, repeat_n, calls, dynamic) == expected


@pytest.mark.parametrize("dynamic", [None, True])
def test_int_argument_sweep_compile_count_matches_torch_compile(counter: Any, dynamic: Any) -> None:
    calls = int_calls(*INT_SWEEP)
    expected, _ = torch_compile_count(repeat_n, calls, dynamic)
    assert strata_count(counter, repeat_n, calls, dynamic) == expected
    assert counter.count == (2 if dynamic is None else 1)


def test_int_argument_becomes_a_symint_placeholder_on_the_second_value(counter: Any) -> None:
    fn = compile_api.compile(repeat_n, backend=counter)
    x = torch.randn(3)
    same(fn, repeat_n, x, 2)
    same(fn, repeat_n, x, 3)
    first, second = counter.graphs
    assert not any(n.op == "placeholder" and _is_sym(n) for n in first.graph.nodes)
    assert any(n.op == "placeholder" and _is_sym(n) for n in second.graph.nodes)


def test_int_argument_stays_static_with_dynamic_false(counter: Any) -> None:
    calls = int_calls(2, 3, 5, 2)
    assert strata_count(counter, repeat_n, calls, False) == 3


def scale_if_big(x: torch.Tensor, n: int) -> torch.Tensor:
    if n > 3:
        return x * n
    return x - n


def test_branch_on_an_int_argument_matches_torch_compile(counter: Any) -> None:
    calls = int_calls(5, 6, 9, 2, 3, -1, 4, 12, 0)
    expected, _ = torch_compile_count(scale_if_big, calls, None)
    assert strata_count(counter, scale_if_big, calls, None) == expected


def repeat_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = x + 1
    return x


def test_int_used_as_a_loop_count_recompiles_per_value_like_torch_compile(counter: Any) -> None:
    calls = int_calls(2, 3, 4, 2, 3)
    expected, _ = torch_compile_count(repeat_loop, calls, None)
    assert strata_count(counter, repeat_loop, calls, None) == expected


def view_rows(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    return x.reshape(shape[0], -1) * shape[0]


def test_int_inside_a_list_argument_is_automatic_dynamic(counter: Any) -> None:
    x = torch.randn(24)
    calls: list[tuple[Any, ...]] = [(x, [n]) for n in (2, 3, 4, 6, 8, 12)]
    expected, _ = torch_compile_count(view_rows, calls, None)
    assert strata_count(counter, view_rows, calls, None) == expected


SCALE = 3


def times_global(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE


def test_global_int_stays_a_constant_under_dynamic_true(counter: Any) -> None:
    global SCALE
    fn = compile_api.compile(times_global, backend=counter, dynamic=True)
    x = torch.randn(5)
    same(fn, times_global, x)
    placeholders = [n for n in counter.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 1, "x only: the global int is not a graph input"
    try:
        SCALE = 4
        same(fn, times_global, x)  # the constant is guarded: recompile, right result
    finally:
        SCALE = 3
    assert counter.count == 2


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.fc2 = torch.nn.Linear(5, 3)
        self.register_buffer("shift", torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) + self.shift


def test_parameters_and_buffers_keep_static_sizes_under_dynamic_true(counter: Any) -> None:
    model = TwoLayers()
    compiled = compile_api.compile(model, backend=counter, dynamic=True)
    with torch.no_grad():
        for n in (3, 4, 7, 16):
            x = torch.randn(n, 6)
            torch.testing.assert_close(compiled(x), model(x))
    assert counter.count == 1
    (gm,) = counter.graphs
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    symbolic = [n.name for n in placeholders if _is_sym(n)]
    assert len(placeholders) == 6 and symbolic == [placeholders[0].name], symbolic
    ref_count, ref_graphs = torch_compile_count(
        model, [(torch.randn(n, 6),) for n in (3, 4, 7)], True
    )
    assert ref_count == 1
    ref_symbolic = [
        n.name
        for n in ref_graphs[0].graph.nodes
        if n.op == "placeholder"
        and isinstance(n.meta.get("example_value"), torch.Tensor)
        and _is_sym(n)
    ]
    assert len(ref_symbolic) == 1  # the input only


def test_dynamic_true_guards_parameters_with_module_params(counter: Any) -> None:
    import logging

    texts: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            texts.append(record.getMessage())

    logger = logging.getLogger("strata.guards")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        model = TwoLayers()
        compiled = compile_api.compile(model, backend=counter, dynamic=True)
        x = torch.randn(4, 6)
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = "\n".join(texts)
    assert "MODULE_PARAMS" in text, text
    # Parameter metadata is listed indented under MODULE_PARAMS, not as guards of their own.
    own = [line for line in text.splitlines() if line.startswith("TENSOR_MATCH")]
    assert own and not any("_parameters" in line for line in own), own
    assert "size=[3] stride=[1]" in text  # the buffer's sizes: static
    with torch.no_grad():
        model.fc1.weight.mul_(2)  # same object, new values: no recompile, new result
    y = torch.randn(9, 6)
    torch.testing.assert_close(compiled(y), model(y))
    model.fc1 = torch.nn.Linear(6, 5)  # a new module: MODULE_PARAMS fails, recompile
    torch.testing.assert_close(compiled(y), model(y))
    assert counter.count == 2


def double_if_int(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * 2 if isinstance(n, int) else x


def times_digits(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * len(str(n)) + len(repr(n))


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [double_if_int, times_digits])
def test_python_view_of_a_symbolic_int_is_the_int(counter: Any, dynamic: Any, fn: Any) -> None:
    # isinstance(n, int) is True and str(n) is its digits (specialised), not the symbol's name.
    calls = int_calls(2, 3, 15, 3, 2, 100, 6)
    expected, _ = torch_compile_count(fn, calls, dynamic)
    assert strata_count(counter, fn, calls, dynamic) <= expected


def double_if_nonzero(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n if n else x - 1


@pytest.mark.parametrize("dynamic", [None, True])
def test_truth_of_a_symbolic_int_guards_nonzero_not_its_value(counter: Any, dynamic: Any) -> None:
    calls = int_calls(2, 3, 7, -2, 9, 0, 5)
    expected, _ = torch_compile_count(double_if_nonzero, calls, dynamic)
    assert strata_count(counter, double_if_nonzero, calls, dynamic) == expected


INT_PATTERNS: dict[str, Any] = {
    "arith": lambda x, n: x * (n * 3 - 1) + n // 2 - n % 3,
    "shifts": lambda x, n: x * (n << 1) + (n >> 1) + (n & 1),
    "pow": lambda x, n: x * (2**n),
    "true_div": lambda x, n: x * (n / 4),
    "float_mul": lambda x, n: x * (n * 2.5),
    "neg_abs": lambda x, n: x * -n + abs(n),
    "round_floor": lambda x, n: x * round(n / 2) + math.floor(n / 3),
    "divmod": lambda x, n: x * divmod(n, 2)[0] + divmod(n, 2)[1],
    "compare": lambda x, n: x * 2 if n == 3.0 else x,
    "in_tuple": lambda x, n: x * 2 if n in (1, 2, 3) else x,
    "slice": lambda x, n: x[:n] * 2,
    "slice_from": lambda x, n: x[n:] * 2,
    "narrow": lambda x, n: x.narrow(0, 0, n) + 1,
    "topk": lambda x, n: torch.topk(x, n).values,
    "repeat": lambda x, n: x.repeat(n),
    "factory": lambda x, n: torch.ones(n) + n,
    "full": lambda x, n: torch.full((3,), n) + x[:3],
    "zeros_sq": lambda x, n: torch.zeros(n, n) + x.sum(),
    "fstring": lambda x, n: x * len(f"{n:05d}"),
    "dict_key": lambda x, n: {n: x, 0: x}[n] * 2,
    "list_index": lambda x, n: x * [1, 2, 3, 4, 5, 6, 7, 8, 9][n],
    "range_sum": lambda x, n: x * sum(range(n)),
    "returned": lambda x, n: (x + 1, n + 1),
    "min_size": lambda x, n: x[: min(n, x.shape[0])],
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize(
    "name",
    sorted(INT_PATTERNS),
)
def test_int_pattern_gives_eager_results_over_a_sweep(
    counter: Any, dynamic: Any, name: str
) -> None:
    compile_api.config.suppress_errors = False  # an internal error fails the test
    fn = INT_PATTERNS[name]
    compiled = compile_api.compile(fn, backend=counter, dynamic=dynamic)
    x = torch.randn(8)
    for n in (2, 3, 4, 3, 2, 1, 0, 8):
        got, expected = compiled(x, n), fn(x, n)
        torch.testing.assert_close(got, expected)
    assert counter.count >= 1, "captured, not run eagerly"


def sigmoid_scale(a: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sigmoid(a.amax() * k) + a * k


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_symint_input_is_not_baked_in_by_a_retracing_backend(backend: str, dynamic: Any) -> None:
    # The backend is given the SymInt (as torch.compile gives it), not the int's example value:
    # aot retraces with it, so the graph stays right for k = 0 after compiling with k = -2.
    compile_api.config.suppress_errors = False
    fn = compile_api.compile(sigmoid_scale, backend=backend, dynamic=dynamic)
    a = torch.tensor([1.0, 2.0, 3.0])
    for k in (-2, -3, 0, 3, 1, -2):
        torch.testing.assert_close(fn(a, k), sigmoid_scale(a, k))


def test_symint_input_through_aot_forward_and_backward() -> None:
    fn = compile_api.compile(sigmoid_scale, backend="aot_eager")
    for k in (2, 3, 0, 5, -1):
        a = torch.randn(4, requires_grad=True)
        b = a.detach().clone().requires_grad_(True)
        fn(a, k).sum().backward()
        sigmoid_scale(b, k).sum().backward()
        torch.testing.assert_close(a.grad, b.grad)


def _closure_times(k: int) -> Any:
    def times_k(x: torch.Tensor) -> torch.Tensor:
        return x * k

    return times_k


@pytest.mark.parametrize("dynamic", [None, True])
def test_closure_int_compile_count_equals_torch_compile(counter: Any, dynamic: Any) -> None:
    import torch._dynamo

    x = torch.randn(3)
    fns = [_closure_times(k) for k in (2, 3, 5, 7)]  # one code object, four cell values
    for fn in fns:
        same(compile_api.compile(fn, backend=counter, dynamic=dynamic), fn, x)
    reference: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        reference.append(gm)
        return gm.forward

    torch._dynamo.reset()
    for fn in fns:  # one backend object, as compile_api's counter: one shared cache
        torch.compile(fn, backend=backend, dynamic=dynamic)(x)
    torch._dynamo.reset()
    assert counter.count == len(reference)


def times_default(x: torch.Tensor, n: int = 3) -> torch.Tensor:
    return x * n


@pytest.mark.parametrize("dynamic", [None, True])
def test_default_int_compile_count_equals_torch_compile(counter: Any, dynamic: Any) -> None:
    x = torch.randn(3)
    calls: list[tuple[Any, ...]] = [(x,), (x, 4), (x,), (x, 5), (x, 0)]
    expected, _ = torch_compile_count(times_default, calls, dynamic)
    assert strata_count(counter, times_default, calls, dynamic) == expected


def test_automatic_dynamic_int_is_logged(counter: Any) -> None:
    import logging

    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("strata.dynamic")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        fn = compile_api.compile(repeat_n, backend=counter)
        same(fn, repeat_n, torch.randn(2), 2)
        same(fn, repeat_n, torch.randn(2), 3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("L['n'] changed from 2 to 3" in m for m in messages), messages


class Settings:
    def __init__(self, k: int) -> None:
        self.k = k


def times_setting(x: torch.Tensor, cfg: Settings) -> torch.Tensor:
    return x * cfg.k


@pytest.mark.parametrize("dynamic", [None, True])
def test_int_field_of_an_object_argument_compile_count_equals_torch_compile(
    counter: Any, dynamic: Any
) -> None:
    x = torch.randn(3)
    calls: list[tuple[Any, ...]] = [(x, Settings(k)) for k in (2, 3, 5, 7, 0)]
    expected, _ = torch_compile_count(times_setting, calls, dynamic)
    assert strata_count(counter, times_setting, calls, dynamic) == expected


class Scaler(torch.nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


def test_int_attribute_of_a_module_stays_a_constant_under_dynamic_true(counter: Any) -> None:
    model = Scaler(3)
    compiled = compile_api.compile(model, backend=counter, dynamic=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), model(x))
    assert sum(1 for n in counter.graphs[0].graph.nodes if n.op == "placeholder") == 1
    model.k = 5  # guarded by value: recompile, right result
    torch.testing.assert_close(compiled(x), model(x))
    assert counter.count == 2


# ---------------------------------------------------------------- backend="inductor"
# The generated code must run for every size, not an eager fallback: inductor_lite logs
# "compiled graph: ... size symbols" for a symbolic compile and "graph run eagerly" for a call
# its compiled code could not take; an eager fallback of a whole graph is a RuntimeWarning.


class InductorLog:
    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        caplog.set_level(logging.DEBUG, logger="strata.inductor_lite")

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.caplog.records if r.name == "strata.inductor_lite"]

    def assert_compiled_code_ran(self, symbolic_graphs: int) -> None:
        msgs = self.messages()
        compiled = [m for m in msgs if m.startswith("compiled graph:")]
        assert sum("size symbols" in m for m in compiled) == symbolic_graphs, msgs
        assert all(" 0 kernels" not in m for m in compiled), msgs
        assert not [m for m in msgs if "run eagerly" in m or "eagerly" in m], msgs


def mlp_step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x @ w1)
    return torch.softmax(torch.nn.functional.layer_norm(h @ w2, (w2.shape[1],)), dim=-1)


@pytest.mark.parametrize("dynamic", [True, None])
def test_inductor_one_symbolic_compile_runs_every_size(
    caplog: pytest.LogCaptureFixture, dynamic: Any
) -> None:
    log = InductorLog(caplog)
    count = 0

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        nonlocal count
        count += 1
        return inductor_lite.compile_fx(gm, list(example_inputs))

    compile_api.config.suppress_errors = False
    fn = compile_api.compile(mlp_step, backend=backend, dynamic=dynamic)
    w1, w2 = torch.randn(16, 32), torch.randn(32, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an eager fallback fails the test
        for n in (2, 3, 17, 1000, 5):
            x = torch.randn(n, 16)
            torch.testing.assert_close(fn(x, w1, w2), mlp_step(x, w1, w2), atol=1e-5, rtol=1e-5)
    assert count == (1 if dynamic else 2)
    log.assert_compiled_code_ran(symbolic_graphs=1)


def test_inductor_string_backend_dynamic_true_training_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = InductorLog(caplog)
    compile_api.config.suppress_errors = False
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    twin.load_state_dict(model.state_dict())
    fn = compile_api.compile(model, backend="inductor", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n in (2, 3, 17, 1000):
            x = torch.randn(n, 8)
            model.zero_grad()
            twin.zero_grad()
            got, expected = fn(x), twin(x)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
            got.square().mean().backward()
            expected.square().mean().backward()
            for p, q in zip(model.parameters(), twin.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    log.assert_compiled_code_ran(symbolic_graphs=2)  # forward and backward


def _sgd_step_of(params: list[torch.Tensor]) -> Any:
    """One closure code object for every parameter list: a size change reaches automatic dynamic."""

    def step() -> torch.Tensor:
        with torch.no_grad():
            for p in params:
                p.sub_(0.1 * p.grad)
        return params[0].sum()

    return step


def _with_grads(*shapes: tuple[int, ...], parameter: bool) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for shape in shapes:
        t = torch.randn(shape)
        t = torch.nn.Parameter(t) if parameter else t.requires_grad_()
        t.grad = torch.randn(shape)
        out.append(t)
    return out


@pytest.mark.parametrize("parameter", [True, False], ids=["parameters", "leaf-tensors"])
def test_an_update_of_tensors_with_grads_recompiles_for_new_sizes(
    counter: Any, parameter: bool
) -> None:
    # Two "models" of different sizes share the update's code object (the benchmark's training
    # workloads do): the second compile used to fail with ShapeGuardError on a symbol of the
    # fake .grad (created when the parameter was faked, with no source), and ran eagerly.
    compile_api.config.suppress_errors = False  # an internal error fails the test
    for shapes in (((6, 4), (6,)), ((9, 4), (9,)), ((5, 3), (5,))):
        params = _with_grads(*shapes, parameter=parameter)
        twins = [p.detach().clone() for p in params]
        grads = [p.grad.clone() for p in params]  # type: ignore[union-attr]
        compiled = compile_api.compile(_sgd_step_of(params), backend=counter)
        got = compiled()
        for t, g in zip(twins, grads, strict=True):
            t.sub_(0.1 * g)
        torch.testing.assert_close(got, twins[0].sum())
        for p, t in zip(params, twins, strict=True):
            torch.testing.assert_close(p.detach(), t)
    assert counter.count >= 2
