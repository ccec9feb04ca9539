"""What the VM refuses: fullgraph errors name the construct and the user's file:line."""

from __future__ import annotations

import pytest
import torch
from vm_harness import check, run_vm

from symbolic_vm import (
    CaptureConfig,
    GraphBreakNeeded,
    Unsupported,
    allow_in_graph,
    capture,
    disable_marker,
    frame_from_call,
    graph_break,
    nonstrict_trace,
)


def data_dependent_branch(x):
    if x.sum() > 0:
        return x
    return -x


def item_call(x):
    return x * x.sum().item()


def nonzero_call(x):
    return torch.nonzero(x)


def boolean_mask(x):
    return x[x > 0]


def prints(x):
    print("hello")
    return x


def raises(x):
    raise ValueError("boom")


def explicit_graph_break(x):
    y = x + 1
    graph_break()
    return y


def coroutine_call(x):
    async def co():
        return x

    return co()


def tolist_call(x):
    return x.tolist()


@pytest.mark.parametrize("fn,needle,line_text", [
    (data_dependent_branch, "data-dependent branch", "if x.sum() > 0:"),
    (item_call, "Tensor.item()", "return x * x.sum().item()"),
    (nonzero_call, "data-dependent operation", "return torch.nonzero(x)"),
    (boolean_mask, "data-dependent operation", "return x[x > 0]"),
    (prints, "print", 'print("hello")'),
    (raises, "raise statement", 'raise ValueError("boom")'),
    (explicit_graph_break, "graph_break()", "graph_break()"),
    (coroutine_call, "coroutine", "return co()"),
    (tolist_call, "Tensor.tolist()", "return x.tolist()"),
])
def test_fullgraph_unsupported_names_construct_file_and_line(fn, needle, line_text):
    with pytest.raises(Unsupported) as info:
        run_vm(fn, torch.randn(4))
    err = info.value
    assert needle in err.reason
    assert err.filename == __file__
    assert err.source_line == line_text
    assert err.lineno > 0 and err.hint
    assert f"{__file__}:{err.lineno}" in str(err)


def _calls_item(x):
    return x.sum().item()


def error_inside_inlined_call(x):
    y = x + 1
    return _calls_item(y)


def test_error_inside_an_inlined_function_points_at_the_innermost_line():
    with pytest.raises(Unsupported) as info:
        run_vm(error_inside_inlined_call, torch.randn(3))
    assert info.value.source_line == "return x.sum().item()"


def branch_in_inference_mode_in_no_grad(x):
    # Inference mode mixed with grad-mode blocks: which grad mode to restore at the break is
    # not tracked, so the frame runs eagerly.
    with torch.no_grad():
        with torch.inference_mode():
            if x.sum() > 0:
                x = x - 1
    return x


def test_without_fullgraph_a_break_the_vm_cannot_make_asks_for_eager_with_a_record():
    frame = frame_from_call(branch_in_inference_mode_in_no_grad, (torch.randn(3),))
    with pytest.raises(GraphBreakNeeded) as info:
        capture(frame, CaptureConfig(fullgraph=False))
    (record,) = info.value.breaks
    assert record.filename == __file__
    assert record.source_line == "if x.sum() > 0:"
    assert "data-dependent" in record.reason


def test_grad_mode_is_restored_after_a_failed_capture():
    def fn(x):
        with torch.no_grad():
            return x.sum().item()

    with pytest.raises(Unsupported):
        run_vm(fn, torch.randn(2))
    assert torch.is_grad_enabled()


def opaque_helper(x):
    # Would be unsupported if traced (item()), but allow_in_graph keeps it opaque... on fakes it
    # still must run, so use an op that is fine on fakes.
    return torch.sin(x) * 2 + 1


allow_in_graph(opaque_helper)


def uses_allowed(x):
    return opaque_helper(x) + 1


def test_allow_in_graph_makes_one_call_function_node():
    compiled = check(uses_allowed, torch.randn(3))
    assert opaque_helper in compiled.targets()
    assert len(compiled.targets()) == 2


@nonstrict_trace
def nonstrict_helper(x, k):
    return x.cos() * k


def uses_nonstrict(x):
    return nonstrict_helper(x, 3)


def test_nonstrict_trace_function_is_one_node():
    compiled = check(uses_nonstrict, torch.randn(3))
    assert compiled.targets() == [nonstrict_helper]


@disable_marker
def disabled_helper(x):
    return x + 1


def uses_disabled(x):
    return disabled_helper(x)


def test_disabled_function_is_unsupported_in_fullgraph():
    with pytest.raises(Unsupported, match="disabled"):
        run_vm(uses_disabled, torch.randn(2))


def test_unknown_callable_object_is_unsupported_not_called():
    import array  # a C class the VM has no model of (collections.Counter now has one)

    def fn(x):
        return array.array("i", [1, 2]), x

    with pytest.raises(Unsupported):
        run_vm(fn, torch.randn(2))
