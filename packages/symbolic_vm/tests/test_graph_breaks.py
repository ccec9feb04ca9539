"""Graph breaks (fullgraph=False) in the frame itself: graph so far, the instruction run for
real, resume functions captured in turn. Compared with eager, like everything else."""

from __future__ import annotations

import pytest
import torch
from vm_harness import assert_same, run_with_breaks

from symbolic_vm import (
    CaptureConfig,
    GraphBreakNeeded,
    Unsupported,
    capture,
    frame_from_call,
    graph_break,
)


def readme_toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


@pytest.mark.parametrize("sign", [1, -1])
def test_readme_toy_breaks_into_three_graphs_like_torchdynamo(sign):
    a, b = torch.randn(10), torch.randn(10).abs() * sign
    out, results = run_with_breaks(readme_toy, a, b)
    assert_same(out, readme_toy(a, b))
    first, resumed = results
    names = [n.name for n in first.graphs[0].gm.graph.nodes if n.op != "placeholder"]
    assert names == ["abs_1", "add", "truediv", "sum_1", "lt", "output"]
    assert len(first.breaks) == 1 and "data-dependent" in first.breaks[0].reason
    assert first.breaks[0].source_line == "if b.sum() < 0:"
    assert resumed.graphs and not resumed.breaks
    ops = [n.target for n in resumed.graphs[0].gm.graph.nodes if n.op == "call_function"]
    assert len(ops) == (2 if sign < 0 else 1)


EVENTS: list = []


def prints_in_the_middle(x):
    y = x * 2
    EVENTS.append("before")
    print("hello from the middle")
    EVENTS.append("after")
    return y + 1


def test_unsupported_call_runs_for_real_between_the_graphs(capsys):
    EVENTS.clear()
    x = torch.randn(3)
    out, results = run_with_breaks(prints_in_the_middle, x)
    torch.testing.assert_close(out, x * 2 + 1)
    assert capsys.readouterr().out == "hello from the middle\n"
    assert EVENTS == ["before", "after"]  # effects before the break replayed before the call
    assert len(results) == 2


def item_then_more(x):
    scale = x.sum().item()
    return x * scale


def test_item_breaks_and_the_scalar_flows_into_the_next_graph():
    x = torch.randn(4)
    out, results = run_with_breaks(item_then_more, x)
    torch.testing.assert_close(out, item_then_more(x))
    assert len(results[0].breaks) == 1


def explicit_break(x):
    y = torch.sin(x)
    graph_break()
    return torch.cos(y)


def test_graph_break_call_splits_the_function():
    x = torch.randn(3)
    out, results = run_with_breaks(explicit_break, x)
    torch.testing.assert_close(out, explicit_break(x))
    assert [len(r.graphs) for r in results] == [1, 1]


def break_in_a_loop(x):
    for i in range(3):
        x = x + i
        print(i)
    return x


def test_a_break_inside_a_for_loop_runs_the_loop_as_bytecode_between_two_graphs(capsys):
    # TorchDynamo runs the whole frame eagerly here; the VM compiles the code before the loop
    # (nothing here), runs the loop's own bytecode, and resumes after it.
    x = torch.randn(2)
    out, results = run_with_breaks(break_in_a_loop, x)
    assert_same(out, break_in_a_loop(x))
    assert capsys.readouterr().out == "0\n1\n2\n" * 2
    first, after = results
    assert not first.graphs  # the loop starts the frame
    (brk,) = first.breaks
    assert brk.source_line == "print(i)"
    assert "inside a loop" in brk.reason and "runs eagerly" in brk.reason
    assert after.graphs == [] and not after.breaks  # `return x`: no ops left


def break_in_a_loop_between_ops(x):
    y = x.cos()
    for i in range(2):
        y = y + i
        print(i)
    return y.sin()


def test_the_ops_before_and_after_a_loop_region_are_in_graphs(capsys):
    x = torch.randn(3)
    out, results = run_with_breaks(break_in_a_loop_between_ops, x)
    assert_same(out, break_in_a_loop_between_ops(x))
    targets = [
        [n.target for n in r.graphs[0].gm.graph.nodes if n.op.startswith("call_")]
        for r in results
    ]
    assert targets == [["cos"], ["sin"]]


def test_a_break_inside_a_loop_with_fullgraph_still_raises():
    with pytest.raises(Unsupported) as info:
        capture(frame_from_call(break_in_a_loop, (torch.randn(2),)), CaptureConfig(fullgraph=True))
    assert not isinstance(info.value, GraphBreakNeeded)


def keeps_locals(x, n=3):
    y = x * n
    z = [y, n]
    print("z")
    return z[0] + z[1] + y


def test_locals_and_containers_survive_the_break():
    x = torch.randn(2)
    out, _ = run_with_breaks(keeps_locals, x)
    torch.testing.assert_close(out, keeps_locals(x))


def _helper_with_print(x):
    print("inside")
    return x + 1


def break_in_inlined_call(x):
    return _helper_with_print(x * 2)


def test_a_failure_inside_an_inlined_call_breaks_at_the_call_in_the_frame(capsys):
    # Traced again, stopping before the call: the callee then runs for real (and a frame hook
    # would capture it on its own).
    x = torch.randn(2)
    out, results = run_with_breaks(break_in_inlined_call, x)
    torch.testing.assert_close(out, break_in_inlined_call(x))
    assert capsys.readouterr().out == "inside\ninside\n"
    (record,) = results[0].breaks
    assert record.source_line == 'print("inside")'
    assert len(results[0].graphs) == 1  # x * 2 before the call


def break_in_no_grad(x):
    with torch.no_grad():
        print("x")
        return x * 2


@pytest.mark.parametrize("requires_grad", [True, False])
def test_a_break_inside_no_grad_keeps_grad_mode_right_on_both_sides(capsys, requires_grad):
    x = torch.randn(2, requires_grad=requires_grad)
    out, results = run_with_breaks(break_in_no_grad, x)
    expected = break_in_no_grad(x)
    assert_same(out, expected)
    assert torch.is_grad_enabled()
    assert len(results[0].breaks) == 1


def break_between_grad_blocks(x):
    with torch.no_grad():
        a = x * 2
        print("inside")
        b = a + x
    c = x * 3
    return a, b, c


def test_grad_mode_after_a_block_that_was_broken_in_is_restored():
    x = torch.randn(2, requires_grad=True)
    out, _ = run_with_breaks(break_between_grad_blocks, x)
    assert_same(out, break_between_grad_blocks(x))
    assert out[2].requires_grad and not out[1].requires_grad


def break_in_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        print("x")
        return torch.mm(x, x)


def test_a_break_inside_autocast_resumes_inside_a_fresh_autocast_block(capsys):
    x = torch.randn(2, 2)
    out, results = run_with_breaks(break_in_autocast, x)
    assert_same(out, break_in_autocast(x))
    assert not torch.is_autocast_enabled("cpu")
    assert [len(r.breaks) for r in results] == [1, 0]
    enter = torch.amp.autocast_mode._enter_autocast
    resumed = results[1].graphs[0].gm.graph
    assert [n.target for n in resumed.nodes if n.op == "call_function"][0] is enter


def test_fullgraph_still_refuses_instead_of_breaking():
    from symbolic_vm import Unsupported

    with pytest.raises(Unsupported):
        capture(frame_from_call(readme_toy, (torch.randn(2), torch.randn(2))),
                CaptureConfig(fullgraph=True))


def _make_closure_with_break():
    scale = 3.0

    def fn(x, *, shift=1.0):
        y = x * scale
        print("closure")
        return y + shift

    return fn


def test_break_in_a_closure_with_keyword_only_arguments():
    fn = _make_closure_with_break()
    x = torch.randn(3)
    out, results = run_with_breaks(fn, x)
    torch.testing.assert_close(out, fn(x))
    assert len(results[0].breaks) == 1


class PrintingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = torch.relu(self.lin(x))
        print("shape", tuple(h.shape))
        return self.lin(h).sum(-1)


def test_break_in_a_module_forward():
    model = PrintingModule()
    x = torch.randn(2, 4)
    out, results = run_with_breaks(model.forward, x)
    torch.testing.assert_close(out, model(x))
    assert [len(r.graphs) for r in results] == [1, 1]


def two_breaks(x):
    a = x + 1
    print("one")
    b = a * 2
    print("two")
    return b - 1


def test_two_breaks_give_three_graphs():
    x = torch.randn(2)
    out, results = run_with_breaks(two_breaks, x)
    torch.testing.assert_close(out, two_breaks(x))
    assert [len(r.breaks) for r in results] == [1, 1, 0]


def comprehension_then_break(x, k=2):
    ys = [x * i * k for i in range(3)]  # on 3.11, k is a cell of this frame
    print("mid")
    return sum(ys) + k


def closure_made_after_the_break(x):
    k = 3
    y = x * k
    print("mid")
    f = lambda t: t + k  # noqa: E731
    return f(y)


@pytest.mark.parametrize("fn", [comprehension_then_break, closure_made_after_the_break])
def test_breaks_in_frames_with_cell_variables(fn):
    x = torch.randn(2)
    out, results = run_with_breaks(fn, x)
    torch.testing.assert_close(out, fn(x))
    assert len(results[0].breaks) == 1


def closure_alive_at_the_break(x):
    k = 3
    f = lambda t: t + k  # noqa: E731
    print("mid")
    return f(x)


def test_a_function_made_in_the_frame_and_alive_at_the_break_is_rebuilt_for_the_resume(capsys):
    # The closure is rebuilt with its own cell after the graph and handed to the resume
    # function (functions made in the frame may leave it, 23b464b): a break, not eager.
    x = torch.randn(2)
    out, results = run_with_breaks(closure_alive_at_the_break, x)
    torch.testing.assert_close(out, closure_alive_at_the_break(x))
    assert len(results[0].breaks) == 1
    assert capsys.readouterr().out == "mid\nmid\n"  # once compiled, once eagerly


def break_in_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        print("inside")
        z = y * x
    return z + x


def break_in_inference_mode(x):
    with torch.inference_mode():
        y = x * 2
        print("inside")
        z = y * x
    return z + 1


@pytest.mark.parametrize("fn", [break_in_set_grad_enabled, break_in_inference_mode])
def test_breaks_inside_grad_and_inference_blocks_resume_inside_a_fresh_block(fn, capsys):
    x = torch.randn(3, requires_grad=True)
    out, results = run_with_breaks(fn, x)
    expected = fn(x)
    assert_same(out, expected)
    assert out.is_inference() == expected.is_inference()
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    assert [len(r.breaks) for r in results] == [1, 0]
    # The resume function entered the block again: its graph starts by switching the mode.
    first = next(n for n in results[1].graphs[0].gm.graph.nodes if n.op == "call_function")
    assert first.target in (torch._C._set_grad_enabled,
                            torch.autograd.grad_mode._enter_inference_mode)


class _UserManager:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def break_in_user_manager(x):
    with _UserManager():
        y = x * 2
        print("inside")
    return y


def test_a_break_inside_a_traced_user_manager_hands_it_on_to_the_resume_function(capsys):
    x = torch.randn(2)
    out, results = run_with_breaks(break_in_user_manager, x)
    assert_same(out, break_in_user_manager(x))
    (brk,) = results[0].breaks
    assert "with block" not in brk.reason  # a plain break, not a region
    assert [len(r.graphs) for r in results] == [1, 0]  # mul, inside the block | nothing
    assert [len(r.breaks) for r in results] == [1, 0]


class _MaySuppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is KeyError


def break_in_maybe_suppressing_manager(x):
    with _MaySuppress():
        y = x * 2
        print("inside")
    return y


def test_a_break_inside_a_manager_that_may_suppress_runs_its_with_statement_as_a_region(capsys):
    x = torch.randn(2)
    out, results = run_with_breaks(break_in_maybe_suppressing_manager, x)
    assert_same(out, break_in_maybe_suppressing_manager(x))
    (brk,) = results[0].breaks
    assert "a graph break inside a with block" in brk.reason
    assert [len(r.graphs) for r in results] == [0, 0]  # no op before the statement nor after


def stack_value_is_a_local(x):
    y = x * 2
    return y + len(str(print("mid")))


def test_a_stack_value_that_is_a_local_reaches_the_resume_graph_under_its_name(capsys):
    x = torch.randn(3)
    out, results = run_with_breaks(stack_value_is_a_local, x)
    torch.testing.assert_close(out, stack_value_is_a_local(x))
    names = [n.name for n in results[1].graphs[0].gm.graph.nodes if n.op == "placeholder"]
    assert names == ["y"]
