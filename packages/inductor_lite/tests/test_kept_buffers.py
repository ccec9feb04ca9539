"""Intermediate buffers of a C++ wrapper kept between calls (kept_buffers.py).

Every result is compared with eager on every call, and results of earlier calls must stay
as they were: no tensor handed to the caller may share a kept buffer's memory.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from inductor_lite import InductorConfig


def _kept_memory(c: Any) -> list[tuple[int, int]]:
    ns = c.run.__globals__
    spans = []
    for name, t in ns.items():
        if name.startswith("_keep") and isinstance(t, torch.Tensor):
            start = t.untyped_storage().data_ptr()
            spans.append((start, start + t.untyped_storage().nbytes()))
    return spans


def _shares_kept_memory(c: Any, out: torch.Tensor) -> bool:
    p = out.untyped_storage().data_ptr()
    return any(a <= p < b for a, b in _kept_memory(c))


def test_intermediates_are_kept_and_results_never_share_their_memory(check: Any) -> None:
    w = torch.randn(16, 16)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.sin(x) * 2  # a kernel's intermediate, read by a matmul: kept
        b = a @ w
        # cos(b) dies at the second matmul, whose result is returned: it must not take the
        # kept buffer's memory (out=) though it has the same layout
        return torch.relu(b) + 1, torch.cos(b) @ w

    x1, x2 = torch.randn(16, 16), torch.randn(16, 16)
    c = check(fn, [x1], atol=1e-4, rtol=1e-4)
    assert "kept between calls" in c.wrapper_source
    assert _kept_memory(c)
    with torch.no_grad():
        first = c(x1)
        kept_first = [t.clone() for t in first]
        second = c(x2)
    for got, want in zip(second, fn(x2), strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for got, want in zip(first, kept_first, strict=True):
        assert torch.equal(got, want)  # the second call wrote none of the first's results
    assert not any(_shares_kept_memory(c, t) for t in (*first, *second))


def test_a_call_while_the_buffers_are_in_use_runs_the_allocating_wrapper(check: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.sin(x) @ x, -1).sum(0)

    x = torch.randn(32, 32)
    c = check(fn, [x], atol=1e-4, rtol=1e-4)
    ns = c.run.__globals__
    assert "_kept_acquire" in ns
    # as if the graph were running on another thread, or further up this one's stack
    assert ns["_kept_acquire"](False)
    try:
        y = torch.randn(32, 32)
        with torch.no_grad():
            torch.testing.assert_close(c(y), fn(y), atol=1e-4, rtol=1e-4)
    finally:
        ns["_kept_release"]()
    assert ns["_kept_acquire"](False)  # the call above left the lock as it found it
    ns["_kept_release"]()


def test_threads_calling_one_graph_at_once_get_eager_results(check: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.exp(x * 0.1) @ x.t()) * 3

    c = check(fn, [torch.randn(64, 64)], atol=1e-4, rtol=1e-4)
    errors: list[str] = []

    def worker(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for _ in range(20):
            x = torch.randn(64, 64, generator=g)
            with torch.no_grad():
                got, want = c(x), fn(x)
            if not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
                errors.append(f"thread {seed}: {(got - want).abs().max().item()}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_buffers_beyond_the_byte_limit_are_allocated_per_call(
    config: InductorConfig, check: Any
) -> None:
    w = torch.randn(64, 64)

    def fn(x: torch.Tensor) -> torch.Tensor:
        small = torch.sin(x[:1]) * 2  # 256 bytes: kept
        big = torch.cos(x) * 2  # 16 KiB: over the limit, allocated per call
        return (big @ w) + (small @ w)

    limited = dataclasses.replace(config, kept_buffer_bytes=1024)
    x = torch.randn(64, 64)
    c = check(fn, [x], atol=1e-4, rtol=1e-4, config=limited)
    assert "kept between calls" in c.wrapper_source
    assert "_empty(" in c.wrapper_source
    assert sum(b - a for a, b in _kept_memory(c)) <= 1024
    none = check(
        fn, [x], atol=1e-4, rtol=1e-4, config=dataclasses.replace(config, kept_buffer_bytes=0)
    )
    assert "kept" not in none.wrapper_source


def test_a_matmul_result_read_only_inside_the_graph_is_written_into_a_kept_buffer(
    check: Any,
) -> None:
    w = torch.randn(32, 32)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.sin(x) @ w) + 1  # the matmul's result dies in the epilogue

    c = check(fn, [torch.randn(32, 32)], atol=1e-4, rtol=1e-4)
    assert "out=_keep" in c.wrapper_source
    for _ in range(2):
        x = torch.randn(32, 32)
        with torch.no_grad():
            out = c(x)
        torch.testing.assert_close(out, fn(x), atol=1e-4, rtol=1e-4)
        assert not _shares_kept_memory(c, out)


def test_views_of_kept_buffers_handed_to_aten_are_made_once(check: Any) -> None:
    w = torch.randn(16, 8)

    def fn(x: torch.Tensor) -> torch.Tensor:
        # sin(x) is a kept (4, 4, 16) buffer; the matmuls read it as (16, 16) and transposed
        a = torch.sin(x).reshape(16, 16)
        return torch.relu(a @ w).sum() + (a.t() @ a).cos().sum()

    c = check(fn, [torch.randn(4, 4, 16)], atol=1e-4, rtol=1e-4)
    assert "_kview" in c.wrapper_source
    views = [t for name, t in c.run.__globals__.items() if name.startswith("_kview")]
    assert views and all(_shares_kept_memory(c, v) for v in views)
    for _ in range(2):  # later calls read the views of the kept memory they refill
        x = torch.randn(4, 4, 16)
        with torch.no_grad():
            out = c(x)
        torch.testing.assert_close(out, fn(x), atol=1e-4, rtol=1e-4)
