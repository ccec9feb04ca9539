"""TORCH_LOGS' channel names and verbosity, torch._logging.set_logs, and what each channel says."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import compile_api
from compile_api import logs

HERE = Path(__file__).resolve()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TORCH_LOGS", "STRATA_LOGS", "TORCH_TRACE", "STRATA_TRACE"):
        env.pop(name, None)
    env.update(extra)
    return env


@pytest.fixture
def channels_off() -> Iterator[None]:
    yield
    compile_api.set_logs(**dict.fromkeys(logs.CHANNELS, False))
    logging.getLogger("strata").setLevel(logging.NOTSET)


MODEL = textwrap.dedent(
    """
    import torch, compile_api

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 8)

        def forward(self, x, n):
            y = self.fc(x)
            return torch.relu(y) * n

    m = Model()
    f = compile_api.compile(m, backend="eager")
    x = torch.randn(4, 16)
    torch.testing.assert_close(f(x, 2), m(x, 2))
    torch.testing.assert_close(f(x, 3), m(x, 3))
    print("DONE")
    """
)


def _run(
    tmp_path: Path, env: dict[str, str], body: str = MODEL
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "model.py"
    script.write_text(body)
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )


def test_torch_logs_channels_print_graph_code_guards_and_recompiles(tmp_path: Path) -> None:
    done = _run(tmp_path, _env(TORCH_LOGS="graph_code,guards,recompiles"))
    assert done.returncode == 0, done.stderr
    assert "DONE" in done.stdout
    err = done.stderr
    # graph_code: shapes, strides and devices per value, and the user's source line.
    assert 'x: "f32[4, 16][16, 1]cpu"' in err, err
    assert "model.py:10 in forward, code: y = self.fc(x)" in err, err
    # guards: each guard once, readable names, the user's line.
    guard_lines = [ln for ln in err.splitlines() if ln.startswith("TENSOR_MATCH: L['x']")]
    assert len(guard_lines) == 2, err  # one per compile (n=2, then n=3)
    assert "y = self.fc(x)  # " in guard_lines[0] and "model.py:10 in forward" in guard_lines[0]
    assert "__strata_" not in err
    assert "torch.nn.modules.linear.F.linear" in err
    assert "another compile() of this code is running" not in err
    assert "COMPILE_CONTEXT: the running call is compile(backend='eager'" in err
    # recompiles: labelled by the cache entry that failed.
    (failed,) = [ln for ln in err.splitlines() if "- 0/0: L['n'] == 2" in ln]
    # ... with the user's line that read it (n left no graph input: found in the bytecode).
    assert "# return torch.relu(y) * n  # " in failed and "model.py:11 in forward" in failed


def test_strata_logs_takes_the_same_names(tmp_path: Path) -> None:
    done = _run(tmp_path, _env(STRATA_LOGS="recompiles"))
    assert done.returncode == 0, done.stderr
    assert "Recompiling forward" in done.stderr
    assert "TENSOR_MATCH" not in done.stderr


def test_plus_dynamo_is_a_verbosity_and_unknown_names_only_warn(tmp_path: Path) -> None:
    done = _run(tmp_path, _env(STRATA_LOGS="+dynamo,no_such_channel"))
    assert done.returncode == 0, done.stderr
    assert "DONE" in done.stdout
    assert "no_such_channel" in done.stderr  # the warning
    assert "[strata.symbolic_vm]" in done.stderr or "[strata.fxbuild]" in done.stderr
    # A channel's record is printed once, not once per logger it passes.
    assert done.stderr.count("Recompiling forward") == 1


def test_torch_logging_set_logs_from_user_code_is_followed(tmp_path: Path) -> None:
    body = MODEL.replace(
        "m = Model()", "torch._logging.set_logs(recompiles=True)\nm = Model()"
    )
    done = _run(tmp_path, _env(), body)
    assert done.returncode == 0, done.stderr
    assert "Recompiling forward" in done.stderr


def test_parse_spec_knows_torch_names() -> None:
    channels, levels = logs.parse_spec("graph_code,+dynamo,-inductor,output_code,perf_hints")
    assert channels == {"graph_code", "output_code", "perf_hints"}
    assert levels == {"strata": logging.DEBUG, "strata.inductor_lite": logging.ERROR}
    with pytest.warns(UserWarning, match="bogus"):
        logs.parse_spec("bogus", "TORCH_LOGS")


def _sin_twice(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


def test_output_code_and_aot_graphs_channels(
    caplog: pytest.LogCaptureFixture, channels_off: None
) -> None:
    compile_api.set_logs(output_code=True, aot_graphs=True)
    with caplog.at_level(logging.DEBUG, logger="strata"):
        fn = compile_api.compile(_sin_twice, backend="inductor")
        x = torch.randn(8, requires_grad=True)
        out = fn(x)
        torch.testing.assert_close(out, _sin_twice(x))
    text = caplog.text
    assert "aot_forward_graph" in text and "aot_backward_graph" in text
    assert "# ---- kernels (C++) ----" in text and "# ---- wrapper (Python) ----" in text


def _breaks(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("side effect")
    return y * 2


def test_perf_hints_say_why_a_frame_has_breaks(
    caplog: pytest.LogCaptureFixture, channels_off: None
) -> None:
    compile_api.set_logs(perf_hints=True)
    with caplog.at_level(logging.DEBUG, logger="strata.perf_hints"):
        x = torch.randn(3)
        torch.testing.assert_close(compile_api.compile(_breaks, backend="eager")(x), _breaks(x))
    assert "has 1 graph break" in caplog.text
