"""CUDA graphs (cudagraphs.py, ``mode="reduce-overhead"``), each compared with eager.

Everywhere: the runner's bookkeeping on CPU graphs with a stand-in recorder that behaves like a
CUDA graph where it matters here (the recorded outputs live at fixed addresses and a replay
overwrites them; the graph reads the inputs it was recorded with). On a GPU: the real thing,
through compile_fx and through compile_api's mode=, against eager and torch.compile.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import aot
import inductor_lite.cudagraphs as cg
from inductor_lite import CompiledGraph, InductorConfig, compile_aten_graph, compile_fx

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


class FakeRecorder:
    """Records by running once; a replay runs again and writes into the recorded outputs."""

    def __init__(self, device: torch.device) -> None:
        self.fn: Callable[[], tuple[object, ...]] | None = None
        self.outputs: tuple[object, ...] = ()

    def capture(
        self, fn: Callable[[], tuple[object, ...]], inputs: Sequence[object]
    ) -> tuple[object, ...]:
        # a CUDA graph capture launches nothing: the inputs a run writes are put back
        saved = [(t, t.clone()) for t in inputs if isinstance(t, torch.Tensor)]
        self.fn = fn
        self.outputs = fn()
        for t, value in saved:
            t.copy_(value)
        return self.outputs

    def replay(self) -> None:
        assert self.fn is not None
        for static, new in zip(self.outputs, self.fn(), strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(new)


class FailingRecorder(FakeRecorder):
    def capture(
        self, fn: Callable[[], tuple[object, ...]], inputs: Sequence[object]
    ) -> tuple[object, ...]:
        raise RuntimeError("operation not permitted when stream is capturing")


def _runner(
    fn: Callable[..., Any], inputs: list[Any], config: InductorConfig, recorder: Any = FakeRecorder
) -> cg.CudaGraphRunner:
    gm = torch.fx.symbolic_trace(fn)
    with torch.no_grad():
        compiled = compile_fx(gm, inputs, config=config)
    assert isinstance(compiled, CompiledGraph)
    return cg.CudaGraphRunner(compiled, recorder=recorder)


def _mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w + b).sum(1, keepdim=True) * 0.5


def test_replays_match_eager_and_outputs_held_by_the_caller_stay_intact(
    config: InductorConfig,
) -> None:
    w, b = torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [torch.randn(4, 16), w, b], config)
    held = []
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(4, 16)  # a new tensor per call: copied in
            out = runner(x, w, b)
            torch.testing.assert_close(out, _mlp(x, w, b))
            held.append((x, out.clone(), out))
    assert runner.recordings == 1 and runner.replays == 3
    assert runner._rec is not None and runner._rec.in_place.keys() == {1, 2}
    for _, value, out in held:  # no later replay wrote into an output handed out earlier
        torch.testing.assert_close(out, value, rtol=0, atol=0)


def test_an_input_read_in_place_sees_writes_made_between_calls(config: InductorConfig) -> None:
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [x, w, b], config)
    with torch.no_grad():
        for _ in range(5):
            x.normal_()
            w.mul_(0.9)
            torch.testing.assert_close(runner(x, w, b), _mlp(x, w, b))
    assert runner._rec is not None and runner._rec.copied == []


def test_an_input_that_moves_is_recorded_again_and_copied_from_then_on(
    config: InductorConfig,
) -> None:
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [x, w, b], config)
    with torch.no_grad():
        for _ in range(3):
            runner(x, w, b)
        w2 = w * 2  # the weight replaced by a tensor elsewhere (load_state_dict, .to())
        for _ in range(3):
            torch.testing.assert_close(runner(x, w2, b), _mlp(x, w2, b))
    assert runner.recordings == 2
    assert runner._rec is not None and runner._rec.copied == [1]


def test_a_capture_that_fails_runs_the_compiled_graph_and_logs_why(
    config: InductorConfig, caplog: pytest.LogCaptureFixture
) -> None:
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [x, w, b], config, recorder=FailingRecorder)
    with caplog.at_level(logging.INFO, logger="strata.inductor_lite"), torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(runner(x, w, b), _mlp(x, w, b))
    assert runner.skip_reason is not None and "capture failed" in runner.skip_reason
    assert any("cudagraphs: running this graph unrecorded" in r.message for r in caplog.records)


def test_outputs_viewing_an_input_or_each_other_stay_views(config: InductorConfig) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        return x.view(-1), x[1:], y, y.t()

    shares: list[bool] = []
    for k in range(5):
        x = torch.randn(4, 4)
        if k == 0:
            runner = _runner(f, [x], config)
        with torch.no_grad():
            a, b2, y, yt = runner(x)
        # views of the caller's tensor, whether it was read in place or copied in
        assert a.data_ptr() == x.data_ptr() and b2.data_ptr() == x[1:].data_ptr()
        torch.testing.assert_close(y, x * 2)
        torch.testing.assert_close(yt, y.t())
        # outputs sharing memory unrecorded share it when replayed (and the reverse)
        shares.append(y.untyped_storage().data_ptr() == yt.untyped_storage().data_ptr())
    assert len(set(shares)) == 1
    assert runner.skip_reason is None and runner.replays == 3


def test_cpu_graphs_are_never_recorded_and_say_why(
    config: InductorConfig, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = dataclasses.replace(config, cudagraphs=True)
    gm = torch.fx.symbolic_trace(_mlp)
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    with caplog.at_level(logging.INFO, logger="strata.inductor_lite"), torch.no_grad():
        compiled = compile_fx(gm, [x, w, b], config=cfg)
        torch.testing.assert_close(compiled(x, w, b), _mlp(x, w, b))
    assert isinstance(compiled, CompiledGraph)
    assert any("not CUDA" in r.message for r in caplog.records)


def test_compile_mode_reduce_overhead_reaches_the_backend_and_cpu_runs_unrecorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import compile_api

    compiled = compile_api.compile(_mlp, mode="reduce-overhead")
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    with caplog.at_level(logging.INFO, logger="strata.inductor_lite"), torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x, w, b), _mlp(x, w, b))
    assert any("cudagraphs: running this graph unrecorded" in r.message for r in caplog.records)


def _fake_cudagraphs(monkeypatch: pytest.MonkeyPatch) -> list[cg.CudaGraphRunner]:
    """compile_fx's cudagraphs=True records CPU graphs with the stand-in recorder."""
    made: list[cg.CudaGraphRunner] = []

    def runner(compiled: CompiledGraph) -> cg.CudaGraphRunner:
        made.append(cg.CudaGraphRunner(compiled, recorder=FakeRecorder))
        return made[-1]

    monkeypatch.setattr(cg, "cudagraph_runner", runner)
    return made


def test_an_input_written_by_the_graph_gets_its_new_value_every_replay(
    config: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _fake_cudagraphs(monkeypatch)
    cfg = dataclasses.replace(config, cudagraphs=True)

    def step(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor) -> None:
        buf.mul_(0.9).add_(g)
        p.sub_(0.1 * buf)

    fn = aot.aot_function(
        step, lambda gm, ex: compile_aten_graph(gm, ex, config=cfg), keep_input_mutations=True
    )
    p, buf = torch.randn(8, 4), torch.zeros(8, 4)
    p_e, buf_e = p.clone(), buf.clone()
    for k in range(5):
        g = torch.randn(8, 4)
        # every other call a fresh momentum buffer: a written input that is copied in
        if k >= 3:
            buf, buf_e = buf.clone(), buf_e.clone()
        fn(p, g, buf)
        step(p_e, g, buf_e)
        torch.testing.assert_close(p, p_e)
        torch.testing.assert_close(buf, buf_e)
    assert made and made[0].replays >= 1


def test_a_training_step_with_recorded_forward_and_backward_matches_eager(
    config: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _fake_cudagraphs(monkeypatch)
    cfg = dataclasses.replace(config, cudagraphs=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)
    )
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref.load_state_dict(model.state_dict())
    params = list(model.parameters())
    # through compile_fx as compile_api calls it (the aot route: a forward and a backward)
    fwd = compile_fx(torch.fx.symbolic_trace(model), [torch.randn(8, 16)], config=cfg)
    for _ in range(5):
        x = torch.randn(8, 16)
        loss = fwd(x).square().mean()
        loss.backward()
        loss_e = ref(x).square().mean()
        loss_e.backward()
        torch.testing.assert_close(loss, loss_e)
        for p, q in zip(params, ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad)
            with torch.no_grad():
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
            p.grad = q.grad = None
    assert len(made) == 2 and all(m.replays >= 1 for m in made)  # forward and backward


def test_compile_api_reset_drops_every_recording_and_a_runner_then_records_again(
    config: InductorConfig,
) -> None:
    import compile_api

    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [x, w, b], config)
    other = _runner(_mlp, [x, w, b], config)
    with torch.no_grad():
        for _ in range(3):
            runner(x, w, b)
            other(x, w, b)
    assert {id(r) for r in cg.live_runners()} >= {id(runner), id(other)}
    recordings = [r._rec for r in (runner, other)]
    assert all(rec is not None for rec in recordings)
    # the recorders (a CUDA graph each on a GPU) and the recorded outputs (pool memory there)
    held = [weakref.ref(rec.recorder) for rec in recordings if rec is not None]
    held += [weakref.ref(o) for rec in recordings if rec is not None for o in rec.outputs
             if isinstance(o, torch.Tensor)]
    del recordings
    compile_api.reset()
    gc.collect()
    assert cg.live_runners() == []
    assert runner._rec is None and other._rec is None
    assert [ref() for ref in held] == [None] * len(held)
    assert not cg._CudaRecorder._pools  # the next recording takes a new pool
    # a runner called again warms up, records anew and replays eager's results
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 16)
            torch.testing.assert_close(runner(x, w, b), _mlp(x, w, b))
    assert runner.recordings == 1 and runner.replays >= 2
    assert [id(r) for r in cg.live_runners()] == [id(runner)]


def test_a_runner_nothing_calls_any_more_leaves_the_registry(config: InductorConfig) -> None:
    cg.reset()
    x, w, b = torch.randn(4, 16), torch.randn(16, 8), torch.randn(8)
    runner = _runner(_mlp, [x, w, b], config)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(runner(x, w, b), _mlp(x, w, b))
    assert len(cg.live_runners()) == 1
    gone = weakref.ref(runner)
    del runner
    gc.collect()
    assert gone() is None and cg.live_runners() == []


# ---- on a GPU ----------------------------------------------------------------------------


@needs_cuda
def test_cuda_inference_replays_match_eager_across_calls(config: InductorConfig) -> None:
    cfg = dataclasses.replace(config, cudagraphs=True)
    w, b = torch.randn(64, 32, device="cuda"), torch.randn(32, device="cuda")
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        compiled = compile_fx(torch.fx.symbolic_trace(_mlp), [x, w, b], config=cfg)
    assert isinstance(compiled, cg.CudaGraphRunner)
    held = []
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(16, 64, device="cuda")
            out = compiled(x, w, b)
            torch.testing.assert_close(out, _mlp(x, w, b))
            held.append((out, out.clone()))
    assert compiled.skip_reason is None and compiled.replays == 4
    for out, value in held:
        torch.testing.assert_close(out, value, rtol=0, atol=0)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 64)
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln(x)))))


def _copies(n: int = 2) -> list[_Block]:
    torch.manual_seed(0)
    first = _Block().cuda()
    out = [first]
    for _ in range(n - 1):
        m = _Block().cuda()
        m.load_state_dict(first.state_dict())
        out.append(m)
    return out


@needs_cuda
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_compile_mode_inference_matches_eager_and_torch_compile(mode: str) -> None:
    import compile_api

    model, ref = _copies()
    compiled = compile_api.compile(model, mode=mode)
    torch_compiled = torch.compile(ref, mode=mode)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 32, 64, device="cuda")
            expected = ref(x)
            torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(torch_compiled(x).clone(), expected, rtol=1e-4, atol=1e-5)


@needs_cuda
def test_compile_reduce_overhead_training_steps_match_eager() -> None:
    import compile_api

    model, ref = _copies()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_e = torch.optim.SGD(ref.parameters(), lr=0.05)

    def step(m: torch.nn.Module, o: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
        o.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        return loss.detach()

    compiled_step = compile_api.compile(step, mode="reduce-overhead")
    for _ in range(6):
        x = torch.randn(8, 32, 64, device="cuda")
        torch.testing.assert_close(compiled_step(model, opt, x), step(ref, opt_e, x))
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@needs_cuda
def test_recorded_dropout_draws_the_numbers_eager_draws() -> None:
    import compile_api

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x * 2, p=0.5, training=True) + 1

    compiled = compile_api.compile(f, mode="reduce-overhead")
    x = torch.randn(1024, device="cuda")
    for k in range(5):
        torch.manual_seed(k)
        actual = compiled(x)
        torch.manual_seed(k)
        torch.testing.assert_close(actual, f(x))


@needs_cuda
def test_new_sizes_and_dynamic_shapes_stay_correct_under_reduce_overhead() -> None:
    import compile_api

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 3, dim=-1) + x.mean()

    for dynamic in (None, True):
        compiled = compile_api.compile(f, mode="reduce-overhead", dynamic=dynamic)
        for n in (8, 8, 8, 16, 16, 16, 24, 24, 24, 8):
            x = torch.randn(n, 32, device="cuda")
            torch.testing.assert_close(compiled(x), f(x))


@needs_cuda
def test_compile_api_reset_gives_the_recorded_memory_back_to_the_device() -> None:
    import compile_api

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    x = torch.randn(2048, 1024, device="cuda")  # a 32 MiB hidden activation, recorded
    with torch.no_grad():
        expected = model(x)  # cuBLAS's workspace for this stream exists from here on
    compile_api.reset()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_allocated = torch.cuda.memory_allocated()
    compiled = compile_api.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(compiled(x), expected, atol=1e-4, rtol=1e-4)
    assert cg.live_runners() and all(r.replays >= 1 for r in cg.live_runners())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # what stays reserved now is live memory and the recorded pool
    recorded = torch.cuda.memory_reserved()
    compile_api.reset()
    gc.collect()
    assert cg.live_runners() == []
    # nothing of the recording stays allocated, and its pool's memory went back to the device
    assert torch.cuda.memory_allocated() <= base_allocated
    assert torch.cuda.memory_reserved() <= recorded - 32 * 2**20
    with torch.no_grad():  # compiled and recorded again from scratch
        for _ in range(4):
            torch.testing.assert_close(compiled(x), expected, atol=1e-4, rtol=1e-4)
    assert cg.live_runners()
    compile_api.reset()
