"""The scheduler's decisions, asserted as kernel counts on known graphs."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from inductor_lite import InductorConfig
from inductor_lite.ir import PointwiseNode, ReductionNode


def test_six_op_pointwise_chain_is_one_kernel(check: Any) -> None:
    def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.relu(x * 2 + y) - 1).exp() / 3

    c = check(chain, [torch.randn(64, 100), torch.randn(100)])
    assert c.kernel_count == 1
    assert len(c.lowered.nodes) == 1  # the intermediates never touch memory


def test_layer_norm_is_one_kernel(check: Any) -> None:
    w, b = torch.randn(96), torch.randn(96)

    def ln(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (96,), w, b)

    c = check(ln, [torch.randn(32, 96)], atol=1e-5, rtol=1e-5)
    assert c.kernel_count == 1
    # the mean, then sum(x - m) and sum((x - m)^2) sharing one loop: two passes over the row
    assert sum(isinstance(n, ReductionNode) for n in c.lowered.nodes) == 3
    kernel = c.kernel_source[c.kernel_source.index('extern "C" void kernel0') :]
    assert kernel.count("for (int64_t ri") == 3  # mean, deviations, normalise


def test_softmax_reductions_and_normalisation_share_one_kernel(check: Any) -> None:
    c = check(lambda x: torch.softmax(x, -1), [torch.randn(16, 200)])
    assert c.kernel_count == 1
    kinds = [type(s.node) for s in c.items[0].steps]
    assert kinds == [ReductionNode, ReductionNode, PointwiseNode]


def test_reductions_over_one_input_share_a_kernel(check: Any) -> None:
    def stats(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.sum(-1), x.amax(-1), x.amin(-1), (x * x).mean(-1)

    c = check(stats, [torch.randn(40, 50)])
    assert c.kernel_count == 1
    # ... and one inner loop: x is loaded once per element for all four accumulators
    kernel = c.kernel_source[c.kernel_source.index('extern "C" void kernel0') :]
    assert kernel.count("for (int64_t ri") == 1
    assert kernel.count("p_arg0[") == 1


def test_reduction_result_read_twice_is_stored_not_recomputed(check: Any) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = x.amax(-1, keepdim=True)
        return x - m, x * m

    c = check(fn, [torch.randn(8, 30)])
    reductions = [n for n in c.lowered.nodes if isinstance(n, ReductionNode)]
    assert len(reductions) == 1


def test_expensive_value_with_two_readers_is_materialised(check: Any) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x
        for _ in range(10):
            y = torch.tanh(y * 1.1 + 0.1).exp().log()
        return y + 1, y * 2

    c = check(fn, [torch.randn(8, 30)])
    # y is stored once and read by both outputs instead of being recomputed in each
    assert len(c.lowered.nodes) == 3


def test_column_reduction_does_not_fuse_with_row_consumer_it_cannot_serve(check: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(0)  # the mean over rows is needed complete before any row

    c = check(fn, [torch.randn(20, 30)])
    assert c.kernel_count == 2


def test_matmul_is_an_aten_call_between_fused_kernels(check: Any) -> None:
    w = torch.randn(32, 16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.relu((x * 2 + 1) @ w).sum(-1)

    c = check(fn, [torch.randn(8, 32)], atol=1e-4, rtol=1e-4)
    assert c.kernel_count == 2
    assert c.fallback_count == 1


def test_wrapper_reuses_a_dead_buffer_of_the_same_layout(
    config: InductorConfig, check: Any
) -> None:
    w = torch.randn(16, 16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        a = torch.sin(x) @ w  # sin(x) lives until the matmul has read it
        return torch.cos(a) @ w

    # the allocating wrapper (no buffer kept between calls: those are never handed to a result)
    no_kept = dataclasses.replace(config, kept_buffer_bytes=0)
    c = check(fn, [torch.randn(16, 16)], atol=1e-4, rtol=1e-4, config=no_kept)
    src = c.wrapper_source
    # cos(a) is written over a (its only reader), and the second matmul's result goes into
    # the dead buffer of sin(x): one buffer allocated for four values
    assert "# in place" in src
    assert "out=buf0" in src
    assert src.count("_empty(") == 1


def test_in_place_only_when_the_input_dies_with_the_kernel(check: Any) -> None:
    w = torch.randn(16, 16)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x @ w
        b = torch.relu(a) * 2  # a is read again below: b needs its own buffer
        return b, (b @ w) + a

    c = check(fn, [torch.randn(16, 16)], atol=1e-4, rtol=1e-4)
    lines = c.wrapper_source.splitlines()
    relu_kernel = next(ln for ln in lines if "_kernel0(" in ln)
    assert "# in place" not in "\n".join(lines[: lines.index(relu_kernel)])


def test_value_recomputed_by_later_steps_is_kept_in_a_row_scratch(check: Any) -> None:
    w, b = torch.randn(200), torch.randn(200)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(x, (200,), w, b), -1)

    c = check(fn, [torch.randn(16, 200)], atol=1e-5, rtol=1e-5)
    assert c.kernel_count == 1
    kernel = c.kernel_source[c.kernel_source.index('extern "C" void kernel0') :]
    assert "// one row" in kernel
    assert kernel.count("vexp(") == 1  # exp(y - max) computed once, read back for the divide


def test_residual_stream_is_stored_not_reread_by_every_layer(check: Any) -> None:
    # h_k = h_{k-1} + f(norm(h_{k-1})): each h_k is read by the next norm and the next add.
    # Inlined, the last layer's kernel would re-read x and every earlier layer's output.
    ws = [torch.randn(32, 32) * 0.1 for _ in range(5)]

    def net(x: torch.Tensor) -> torch.Tensor:
        h = x
        for w in ws:
            h = h + F.layer_norm(h, (32,)) @ w
        return F.layer_norm(h, (32,))

    c = check(net, [torch.randn(64, 32)], atol=1e-5, rtol=1e-5)
    for kernel in c.items:
        if hasattr(kernel, "steps"):
            written = {s.node.buf for s in kernel.steps}
            reads = {b for s in kernel.steps for b in _loads(s.node)} - written
            # a value reading more than inline_load_limit (3) buffers is stored: at most 4
            # here, where inlining every layer makes the last kernels read 5 and more
            assert len(reads) <= 4, reads


def _loads(node: Any) -> set[str]:
    from inductor_lite.scheduler import iter_loads

    return {load.buf for load in iter_loads(node.body)}


def test_large_column_sum_is_eagers_vectorised_sum_row_sum_a_kernel(check: Any) -> None:
    # a bias gradient: sum over the batch of a 512x1024 gradient. A row kernel would add
    # each column with a 4 KB stride (one cache line per element); eager's sum(dim=0) streams
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g = x * y
        return g.sum(0), g.sum(-1), x.t().sum(0)

    x, y = torch.randn(512, 1024), torch.randn(512, 1024)
    c = check(fn, [x, y], atol=1e-4, rtol=1e-5)
    sums = [i for i in c.items if not hasattr(i, "steps")]
    assert [str(f.target) for f in sums] == ["aten.sum.dim_IntList"]
    # the row sums (also of the transposed view, which is a row sum in memory) are kernels
    assert c.kernel_count >= 1


def test_small_column_sum_stays_a_kernel(check: Any) -> None:
    c = check(lambda x: (x * 2).sum(0), [torch.randn(64, 100)])
    assert c.fallback_count == 0


def test_transposed_matmul_operand_is_a_view_of_the_stored_value(check: Any) -> None:
    # a weight gradient g.t() @ x: g is computed once in its own (row-major) order and the
    # matmul gets a transposed view, not a second, transposed copy written column by column
    x, w = torch.randn(64, 32), torch.randn(48, 16)

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g = torch.tanh(a) * b
        return g.t() @ x, g @ w

    c = check(fn, [torch.randn(64, 48), torch.randn(64, 48)], atol=1e-4, rtol=1e-4)
    written = [s.node.buf for k in c.items if hasattr(k, "steps") for s in k.steps]
    assert len(written) == 1  # g, stored once
    spec = c.lowered.buffers[written[0]]
    assert spec.sizes == (64, 48) and spec.strides == (48, 1)


def test_matmul_result_takes_a_dead_buffer_of_another_shape_and_equal_size(
    config: InductorConfig, check: Any
) -> None:
    w = torch.randn(16, 16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        z = torch.sin(x).reshape(16, 16) @ w  # sin(x) is an (8, 32) buffer, dead after this
        return torch.cos(z) @ w

    no_kept = dataclasses.replace(config, kept_buffer_bytes=0)  # the allocating wrapper
    c = check(fn, [torch.randn(8, 32)], atol=1e-4, rtol=1e-4, config=no_kept)
    assert "out=_as_view(buf0, (16, 16), (16, 1), 0)" in c.wrapper_source


def test_layer_norm_output_feeding_softmax_is_not_stored(check: Any) -> None:
    # the normalised row reads x, two per-row statistics and two per-column weights: only x
    # is as large as the row block, so it stays inlined (kept in the kernel's row scratch)
    w, b = torch.randn(256), torch.randn(256)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(x, (256,), w, b), -1)

    c = check(fn, [torch.randn(64, 256)], atol=1e-5, rtol=1e-5)
    assert c.kernel_count == 1
    full = [s for s in c.lowered.buffers.values() if s.sizes == (64, 256)]
    out = c.lowered.outputs[0].ref
    assert out is not None
    assert [s.name for s in full if not s.name.startswith("arg")] == [out.buf]


def test_small_node_runs_before_the_aten_calls_it_does_not_read(check: Any) -> None:
    w = torch.randn(64, 64)

    def fn(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x @ w)  # mm (aten), then a kernel reading its result
        s = torch.sqrt(v.abs() + 1)  # reads an input only: no need to wait for the mm
        return y * s

    c = check(fn, [torch.randn(32, 64), torch.randn(64)])
    from inductor_lite.ir import FallbackNode

    kinds = [type(i).__name__ for i in c.items]
    assert isinstance(c.items[1], FallbackNode) and kinds[0] == "Kernel", kinds
    assert c.items[0].steps[0].node.sizes == (64,)


def test_big_node_does_not_join_a_one_row_kernel_as_a_flat_loop(check: Any) -> None:
    def fn(v: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # (16,): one row; the activation after it keeps its own rows (an inner loop of the
        # last dim), not one 65536-long loop recovering every index by division
        return torch.sqrt(v + 1), x * 2 + 1

    c = check(fn, [torch.rand(16), torch.randn(4, 16, 32, 32)])
    big = [s for i in c.items for s in getattr(i, "steps", ()) if s.node.sizes == (4, 16, 32, 32)]
    assert len(big) == 1 and big[0].split == 3


def test_small_step_beside_a_big_one_stays_on_one_thread(check: Any) -> None:
    def fn(v: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sqrt(v + 1), x.abs().amax()  # one kernel of one row, two steps

    c = check(fn, [torch.rand(16), torch.randn(65536)])
    assert c.kernel_count == 1
    kernel = c.kernel_source[c.kernel_source.index('extern "C" void kernel0') :]
    # forking threads for 16 elements costs more than it saves; the 64K reduction forks
    assert kernel.count("#pragma omp parallel") == 1
    assert kernel.count("#pragma omp simd") == 1
