"""Memory of the Triton wrapper: buffers die at their last use, pointwise kernels run in place,
kernel-local values are never stored, and a backward frees its saved activations as it goes.

On CUDA tensors where a GPU is present (peak memory from the caching allocator), else on CPU
tensors through Triton's interpreter (peak memory from a dispatch mode that follows every
storage an op creates). Every compiled result is compared with eager.
"""

from __future__ import annotations

import dataclasses
import os
import re
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"

from inductor_lite import CompiledGraph, InductorConfig, compile_fx  # noqa: E402


class _Storages(TorchDispatchMode):
    """Peak bytes of the storages that ops create while active (CPU stand-in for CUDA's
    ``max_memory_allocated``)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.now = 0
        self.peak = 0

    def _drop(self, ptr: int) -> None:
        entry = self.live[ptr]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[ptr]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() != 0:
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.live:
                    self.live[ptr] = [t.untyped_storage().nbytes(), 0]
                    self.now += self.live[ptr][0]
                    self.peak = max(self.peak, self.now)
                self.live[ptr][1] += 1
                weakref.finalize(t, self._drop, ptr)
        return out


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Bytes allocated during ``fn()`` at its peak, beyond what was allocated before it."""
    if DEV == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        del result
        return torch.cuda.max_memory_allocated() - base
    mode = _Storages()
    with mode:
        result = fn()
    del result
    return mode.peak


@pytest.fixture
def tconfig(config: InductorConfig) -> InductorConfig:
    return dataclasses.replace(config, codegen="triton", triton_autotune_cache={})


def test_triton_kernel_runs_in_place_and_is_applied_once(tcheck_memory: Any) -> None:
    # the GELU-like epilogue writes over the matmul's result; the autotuner launches it several
    # times on those buffers and puts back what it stored, so the result is applied once
    w = torch.randn(64, 64, device=DEV)
    c = tcheck_memory(lambda x: torch.relu(x @ w) * 2 + 1, [torch.randn(32, 64, device=DEV)])
    assert "# in place" in c.wrapper_source


def test_dead_buffers_are_released_at_their_last_use(tcheck_memory: Any) -> None:
    w = torch.randn(256, 256, device=DEV) / 16

    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(6):  # twelve 256 KiB values, at most two of them live at once
            x = torch.sin(x @ w) * 2
        return x

    x = torch.randn(256, 256, device=DEV)
    c = tcheck_memory(chain, [x], atol=1e-4, rtol=1e-4)
    assert "del " in c.wrapper_source
    nbytes = x.numel() * 4
    with torch.no_grad():
        # a wrapper holding every buffer until it returns would need 6 (12 without the
        # kernels running in place); eager needs 3
        compiled_peak = peak_bytes(lambda: c(x))
        assert compiled_peak <= 2 * nbytes
        assert compiled_peak <= peak_bytes(lambda: chain(x))


def test_layer_norm_softmax_stores_only_its_output(tcheck_memory: Any) -> None:
    w, b = torch.randn(256, device=DEV), torch.randn(256, device=DEV)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(x, (256,), w, b), -1)

    x = torch.randn(64, 256, device=DEV)
    c = tcheck_memory(fn, [x], atol=1e-5, rtol=1e-4)
    assert c.kernel_count == 1
    # the normalised rows and the row statistics stay in registers: one buffer, the output
    assert c.wrapper_source.count("_empty(") == 1
    assert c.kernel_source.count("tl.store(") == 1
    if DEV == "cuda":  # Triton's interpreter copies the arguments of each launch
        with torch.no_grad():
            assert peak_bytes(lambda: c(x)) <= x.numel() * 4 + 512


def test_a_value_read_by_another_kernel_is_still_stored(tcheck_memory: Any) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = x.amax(-1, keepdim=True)  # read by this kernel and by the column sum below
        return torch.exp(x - m), m.sum(0)

    c = tcheck_memory(fn, [torch.randn(40, 96, device=DEV)], atol=1e-5, rtol=1e-5)
    assert c.kernel_count >= 1


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) * 0.125
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights @ v


@pytest.mark.parametrize("n", [64, 4200])  # rows in one block (persistent), rows in chunks
def test_softmax_writes_its_probabilities_over_the_scores(tcheck_memory: Any, n: int) -> None:
    # the softmax kernel (max, exp, sum, divide) stores each row only after its max and sum,
    # which read the whole row: it may store over the scores (an aten result dead after it)
    rows = 4 if n > 1000 else n
    q = torch.randn(1, 2, rows, 16, device=DEV)
    k, v = (torch.randn(1, 2, n, 16, device=DEV) for _ in range(2))
    mask = torch.tril(torch.ones(rows, n, dtype=torch.bool, device=DEV))
    c = tcheck_memory(_attention, [q, k, v, mask], atol=1e-5, rtol=1e-4)
    assert c.wrapper_source.count("# in place") == 1
    if DEV == "cuda":
        with torch.no_grad():
            compiled = peak_bytes(lambda: c(q, k, v, mask))
            assert compiled <= peak_bytes(lambda: _attention(q, k, v, mask))


def test_softmax_reading_other_scores_does_not_store_over_them(tcheck_memory: Any) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = a @ b  # the transposed read takes other rows' elements: no store over s
        return torch.softmax(s, dim=-1) * s.transpose(0, 1)

    c = tcheck_memory(
        fn, [torch.randn(48, 32, device=DEV), torch.randn(32, 48, device=DEV)],
        atol=1e-5, rtol=1e-4,
    )
    assert c.kernel_count == 1
    assert "# in place" not in c.wrapper_source


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(128, 512)
        self.b = torch.nn.Linear(512, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.gelu(self.a(x)))


def _train_step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).square().mean()
    loss.backward()  # type: ignore[no-untyped-call]
    return loss.detach()


def test_training_backward_empties_its_inputs_and_matches_eager(tconfig: InductorConfig) -> None:
    torch.manual_seed(0)
    ref = _MLP().to(DEV)
    model = _MLP().to(DEV)
    model.load_state_dict(ref.state_dict())
    gm = torch.fx.symbolic_trace(model)
    x = torch.randn(64, 128, device=DEV)
    compiled = compile_fx(gm, [x], config=tconfig)
    boxed: list[int] = []
    real = CompiledGraph.boxed_call

    def spy(self: CompiledGraph, args: list[Any], **kwargs: Any) -> Any:
        out = real(self, args, **kwargs)  # as_before=True from aot: ignored with a boxed wrapper
        boxed.append(len(args))
        return out

    CompiledGraph.boxed_call = spy  # type: ignore[method-assign]
    try:
        for _ in range(3):  # the first call launches the kernels; later ones run boxed
            for p in (*model.parameters(), *ref.parameters()):
                p.grad = None
            out = compiled(x)
            out.square().mean().backward()
            ref(x).square().mean().backward()
            for p, q in zip(model.parameters(), ref.parameters(), strict=True):
                assert p.grad is not None and q.grad is not None
                torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    finally:
        CompiledGraph.boxed_call = real  # type: ignore[method-assign]
    assert boxed == [0, 0, 0]  # the backward got its inputs boxed, and emptied the list


def test_retained_graph_backward_twice_with_boxed_inputs(tconfig: InductorConfig) -> None:
    # the backward's saved activations are released early only when the graph is not retained
    model = _MLP().to(DEV)
    x = torch.randn(16, 128, device=DEV)
    compiled = compile_fx(torch.fx.symbolic_trace(model), [x], config=tconfig)
    compiled(x).sum().backward()  # launch every kernel once
    model.zero_grad(set_to_none=True)
    loss = compiled(x).sum()
    loss.backward(retain_graph=True)  # type: ignore[no-untyped-call]
    first = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    loss.backward()  # type: ignore[no-untyped-call]
    second = [p.grad for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    eager = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(first) == len(second) == len(eager) == 4
    for a, b, e in zip(first, second, eager, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(b, 2 * e, atol=1e-5, rtol=1e-4)


@pytest.fixture
def tcheck_memory(check: Any, tconfig: InductorConfig) -> Any:
    def run(fn: Any, inputs: list[Any], **kw: Any) -> Any:
        return check(fn, inputs, config=tconfig, **kw)

    return run


def _wrapper_lines(c: CompiledGraph) -> list[str]:
    return [line.strip() for line in c.wrapper_source.splitlines()]


def _aten_results(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, buffer) of each aten call's result in the wrapper, in order."""
    out = []
    for n, line in enumerate(lines):
        m = re.match(r"(buf\d+) = _restride\(_fb\d+\(", line)
        if m:
            out.append((n, m.group(1)))
    return out


def _deleted_before(lines: list[str], buf: str, end: int) -> bool:
    return any(
        line.startswith("del ") and buf in re.findall(r"buf\d+", line) for line in lines[:end]
    )


def test_attention_copies_v_before_the_first_matmul_so_qkv_dies_there(
    tcheck_memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # q, k and v are copies (heads to the front) of one projection: with v's copy in the
    # softmax kernel the projection stayed alive across q @ k^T; copied with q and k, it
    # dies before it (the copy is its last reader and holds a third of its bytes). Nodes
    # this small would be placed early anyway: the small-node limit is lowered to below v's
    # size, as a real model's v (262144 elements in gpt4) is above it
    from inductor_lite import scheduler

    monkeypatch.setattr(scheduler, "_SMALL_NODE", 256)
    torch.manual_seed(0)
    w = torch.randn(32, 96, device=DEV) / 6
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool, device=DEV))

    def attention(x: torch.Tensor) -> torch.Tensor:
        q, k, v = (x @ w).split(32, dim=-1)
        q, k, v = (t.view(2, 16, 2, 16).transpose(1, 2) for t in (q, k, v))
        return _attention(q, k, v, mask)

    c = tcheck_memory(attention, [torch.randn(2, 16, 32, device=DEV)], atol=1e-5, rtol=1e-4)
    lines = _wrapper_lines(c)
    (_, qkv), (first_bmm, _) = _aten_results(lines)[:2]
    assert _deleted_before(lines, qkv, first_bmm)


def test_a_residual_sum_read_twice_is_stored_so_its_terms_die_early(tcheck_memory: Any) -> None:
    # s = a + b read by a layer norm and by the final add: inlined into both, a and b stayed
    # alive across the last matmul; stored once, they die at the layer norm's kernel
    torch.manual_seed(0)
    w1, w2, w3 = (torch.randn(64, 64, device=DEV) / 8 for _ in range(3))

    def block(x: torch.Tensor) -> torch.Tensor:
        s = x @ w1 + x @ w2
        return F.layer_norm(s, (64,)) @ w3 + s

    c = tcheck_memory(block, [torch.randn(32, 64, device=DEV)], atol=1e-4, rtol=1e-4)
    lines = _wrapper_lines(c)
    (_, a), (_, b), (third, _) = _aten_results(lines)[:3]
    assert _deleted_before(lines, a, third) and _deleted_before(lines, b, third)


def test_a_value_an_aten_call_stores_is_read_back_not_recomputed(tcheck_memory: Any) -> None:
    # g = a * scale is stored for the matmul anyway: the later pointwise kernel reads g
    # instead of recomputing it from a, so a dies after g's kernel
    torch.manual_seed(0)
    w1, w2 = torch.randn(64, 64, device=DEV) / 8, torch.randn(32, 16, device=DEV)
    scale = torch.randn(64, device=DEV)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = (x @ w1) * scale
        return g.t() @ w2, torch.sigmoid(g)

    c = tcheck_memory(fn, [torch.randn(32, 64, device=DEV)], atol=1e-4, rtol=1e-4)
    lines = _wrapper_lines(c)
    (_, a), (second, _) = _aten_results(lines)[:2]
    assert _deleted_before(lines, a, second)
