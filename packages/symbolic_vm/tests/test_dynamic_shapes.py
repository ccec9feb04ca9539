"""dynamic=True: symbolic sizes in the graph, SHAPE guards, reuse on other sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from vm_harness import assert_same, run_vm

from symbolic_vm import frame_from_call


def reshape_by_batch(x):
    b = x.shape[0]
    return x.view(b, -1).sum(1), x.shape


def slice_by_size(x, y):
    n = x.size(0)
    return y[:n] * 2 + x.sum()


def branch_on_size(x):
    if x.size(1) > 3:
        return x * 2
    return x - 1


def sizes_in_arithmetic(x):
    b, t = x.shape
    return x.reshape(b * t) / (b + t), b * t


def mlp_any_batch(x, w):
    return F.relu(x @ w).mean(dim=0)


CASES = [
    (reshape_by_batch, [(torch.randn(5, 6),), (torch.randn(3, 4),), (torch.randn(9, 2),)]),
    (slice_by_size, [(torch.randn(3), torch.randn(8)), (torch.randn(4), torch.randn(6))]),
    (branch_on_size, [(torch.randn(2, 5),), (torch.randn(7, 4),)]),
    (sizes_in_arithmetic, [(torch.randn(3, 5),), (torch.randn(6, 2),)]),
    (mlp_any_batch, [(torch.randn(4, 3), torch.randn(3, 5)),
                     (torch.randn(9, 3), torch.randn(3, 5))]),
]


@pytest.mark.parametrize("fn,inputs", CASES, ids=[c[0].__name__ for c in CASES])
def test_one_capture_serves_other_sizes(fn, inputs):
    first, *others = inputs
    compiled = run_vm(fn, *first, dynamic=True)
    assert_same(compiled.output, fn(*first))
    for args in others:
        frame = frame_from_call(fn, args)
        assert compiled.guard(dict(frame.f_locals)), f"guard rejected sizes {args[0].shape}"
        assert_same(compiled.fn(*args), fn(*args))


def test_graph_holds_symbolic_sizes_not_constants():
    compiled = run_vm(reshape_by_batch, torch.randn(5, 6), dynamic=True)
    view = next(n for n in compiled.ops() if n.target == "view")
    assert isinstance(view.args[1], torch.fx.Node)


def test_shape_guard_rejects_sizes_that_take_the_other_branch():
    compiled = run_vm(branch_on_size, torch.randn(2, 5), dynamic=True)
    assert not compiled.guard({"x": torch.randn(2, 3)})


def test_shape_guard_rejects_a_broken_size_relation():
    compiled = run_vm(slice_by_size, torch.randn(3), torch.randn(8), dynamic=True)
    assert not compiled.guard({"x": torch.randn(9), "y": torch.randn(4)})


def test_size_one_dims_stay_static_and_are_guarded():
    compiled = run_vm(reshape_by_batch, torch.randn(1, 6), dynamic=True)
    assert compiled.guard({"x": torch.randn(1, 8)})
    assert not compiled.guard({"x": torch.randn(2, 8)})
