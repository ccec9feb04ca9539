"""A whole training step through compile_api and inductor: the optimizer update is compiled and
its kernels write the parameters in place; everything observable matches eager."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import compile_api

LR = 0.05


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)
    )


def _sgd_step(model: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    params = list(model.parameters())

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        for p in params:
            p.grad = None
        loss = F.mse_loss(model(x), t)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(LR * p.grad)
        return loss.detach()

    return step


def _momentum_step(
    model: torch.nn.Module,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        for p in params:
            p.grad = None
        loss = F.mse_loss(model(x), t)
        loss.backward()
        with torch.no_grad():
            for p, b in zip(params, bufs, strict=True):
                b.mul_(0.9).add_(p.grad)  # a buffer that needs no grad, read after its update
                p.sub_(LR * b)
        return loss.detach()

    step.bufs = bufs  # type: ignore[attr-defined]
    return step


@pytest.mark.parametrize("make", [_sgd_step, _momentum_step], ids=["sgd", "momentum"])
def test_training_step_matches_eager_with_the_update_compiled(
    make: Callable[[torch.nn.Module], Any], caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model, ref = _model(), _model()
    ref.load_state_dict(model.state_dict())
    raw, eager = make(model), make(ref)
    compiled = compile_api.compile(raw)
    ptrs = [p.data_ptr() for p in model.parameters()]
    v0 = [p._version for p in model.parameters()]
    r0 = [p._version for p in ref.parameters()]
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, "strata.inductor_lite"):
        warnings.simplefilter("error", RuntimeWarning)  # no graph may fall back to eager
        for step in range(4):
            x, t = torch.randn(12, 16), torch.randn(12, 8)
            got, want = compiled(x, t), eager(x, t)
            torch.testing.assert_close(got, want, msg=lambda m, s=step: f"loss {s}: {m}")
            assert torch.is_grad_enabled()
            assert not got.requires_grad
            for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p, q, msg=lambda m, n=name: f"{n}: {m}")
                torch.testing.assert_close(p.grad, q.grad, msg=lambda m, n=name: f"{n}.grad: {m}")
                assert p.is_leaf and p.requires_grad and p.grad_fn is None
    for b, c in zip(getattr(raw, "bufs", []), getattr(eager, "bufs", []), strict=True):
        torch.testing.assert_close(b, c, msg=lambda m: f"momentum buffer: {m}")
    # the parameters kept their memory and their versions moved as eager's did
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    assert [p._version - v for p, v in zip(model.parameters(), v0, strict=True)] == [
        q._version - r for q, r in zip(ref.parameters(), r0, strict=True)
    ]
    # the update graph was compiled and its parameter writes are kernel stores into them
    writes = [
        tuple(map(int, m.groups()))
        for m in (re.search(r"(\d+)/(\d+) input writes in place", r.getMessage())
                  for r in caplog.records)
        if m is not None and m.group(2) != "0"
    ]
    assert writes, "no compiled graph wrote its inputs"
    n_params = len(ptrs)
    in_place = sum(w[0] for w in writes)
    assert in_place >= n_params  # at least every parameter (momentum buffers may be copied)


def test_an_update_compiled_for_dynamic_sizes_writes_inputs_of_every_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def update(ps: list[torch.Tensor], gs: list[torch.Tensor], buf: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for p, g in zip(ps, gs, strict=True):
                p.sub_(LR * g)
            buf.mul_(0.5).add_(gs[0].sum())
        return buf.sum()

    torch.manual_seed(0)
    compiled = compile_api.compile(update, dynamic=True)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, "strata.inductor_lite"):
        warnings.simplefilter("error", RuntimeWarning)
        for n in (5, 9, 17):
            ps = [torch.randn(n, 4, requires_grad=True), torch.randn(n, requires_grad=True)]
            gs = [torch.randn(n, 4), torch.randn(n)]
            buf = torch.randn(n, 4)
            ps_e, buf_e = [p.detach().clone() for p in ps], buf.clone()
            got, want = compiled(ps, gs, buf), update(ps_e, gs, buf_e)
            # sums of n * 4 values, added in another order: float32 rounding
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            for p, q in zip(ps, ps_e, strict=True):
                torch.testing.assert_close(p.detach(), q)
            torch.testing.assert_close(buf, buf_e, rtol=1e-4, atol=1e-5)
    compiles = [r.getMessage() for r in caplog.records if "input writes in place" in r.getMessage()]
    assert len(compiles) == 1 and "size symbols" in compiles[0]
    assert re.search(r"[1-9]\d*/3 input writes in place", compiles[0])
