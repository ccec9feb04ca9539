"""Compiled functions called from several threads at once, while recompiles happen."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

import compile_api

N_THREADS = 4


def _scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    # k is a Python constant: each new k is a guard failure and a recompile.
    y = torch.sin(x) * k
    if k % 2:
        y = y + x.sum()
    return y - 1


def _mixed(x: torch.Tensor, y: torch.Tensor, flag: bool) -> tuple[torch.Tensor, torch.Tensor]:
    z = x @ y.t() if flag else x * 2
    return z.relu(), z.mean(dim=0)


class _Counting:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        with self.lock:
            self.graphs += 1
        return gm.forward


def _hammer(work: Callable[[int, int], None], rounds: int) -> list[BaseException]:
    """Run ``work(thread, round)`` on N_THREADS threads started together; the errors."""
    barrier = threading.Barrier(N_THREADS)
    errors: list[BaseException] = []

    def body(tid: int) -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                work(tid, r)
        except BaseException as err:  # collected and re-raised by the test
            errors.append(err)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_four_threads_with_recompiles_give_eager_results() -> None:
    backend = _Counting()
    compiled = compile_api.compile(_scaled, backend=backend)

    def work(tid: int, r: int) -> None:
        k = (tid + r) % 5  # the threads cross each other's constants: recompiles and hits
        x = torch.linspace(-1, 1, 3 + (r % 3)) + tid
        torch.testing.assert_close(compiled(x, k), _scaled(x, k), rtol=0, atol=0)

    errors = _hammer(work, rounds=12)
    assert not errors, errors[0]
    assert backend.graphs >= 5  # one per k at least: recompiles really happened


def test_threads_on_two_functions_with_different_backends_give_eager_results() -> None:
    first = compile_api.compile(_scaled, backend=_Counting())
    second = compile_api.compile(_mixed, backend="aot_eager")

    def work(tid: int, r: int) -> None:
        if tid % 2:
            x = torch.randn(4, 3, generator=torch.Generator().manual_seed(r))
            y = torch.randn(5, 3, generator=torch.Generator().manual_seed(r + 1))
            flag = r % 2 == 0
            for got, want in zip(second(x, y, flag), _mixed(x, y, flag)):
                torch.testing.assert_close(got, want)
        else:
            x = torch.arange(float(2 + r % 4))
            torch.testing.assert_close(first(x, r % 3), _scaled(x, r % 3), rtol=0, atol=0)

    errors = _hammer(work, rounds=10)
    assert not errors, errors[0]


def test_reset_while_another_thread_compiles_keeps_results_right() -> None:
    # Deterministic interleaving: thread A's backend waits until the main thread has called
    # reset(); A then installs its graph after the reset and the main thread compiles the same
    # function for another constant. Graph names are never reused (symbolic_vm keeps numbering
    # across reset), so each cached entry keeps running its own graph. Compiles themselves are
    # serialised by compile_api's compile lock.
    started, go = threading.Event(), threading.Event()
    main = threading.current_thread()

    def slow(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        if threading.current_thread() is not main:
            started.set()
            assert go.wait(timeout=120)
        return gm.forward

    x = torch.linspace(0, 1, 4)
    compiled = compile_api.compile(_scaled, backend=slow)
    results: dict[str, torch.Tensor] = {}
    a = threading.Thread(target=lambda: results.setdefault("a", compiled(x, 1)))
    a.start()
    assert started.wait(timeout=120)
    compile_api.reset()  # while A is inside its backend
    go.set()
    a.join(timeout=120)
    results["main"] = compiled(x, 2)
    torch.testing.assert_close(results["a"], _scaled(x, 1), rtol=0, atol=0)
    torch.testing.assert_close(results["main"], _scaled(x, 2), rtol=0, atol=0)
    # Both entries now cached: each constant must still run its own graph.
    torch.testing.assert_close(compiled(x, 2), _scaled(x, 2), rtol=0, atol=0)
    torch.testing.assert_close(compiled(x, 1), _scaled(x, 1), rtol=0, atol=0)
