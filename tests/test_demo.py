"""The main job runs and shows what the TorchDynamo README shows."""

from __future__ import annotations

import subprocess
import sys


def test_demo_prints_three_graphs_bytecode_guards_explain_and_a_speedup() -> None:
    out = subprocess.run(
        # torch.compile's reference figures with its eager backend: what is checked here is
        # Strata's output; building torch inductor's kernels took most of this test's minutes.
        [sys.executable, "-m", "compile_api.demo", "--repeats", "1"]
        + ["--reference-backend", "eager"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert text.count("my_compiler() called with FX graph:") == 3
    assert "abs_1" in text and "truediv" in text and "lt" in text
    assert "MODIFIED BYTECODE:" in text and "__compiled_fn_" in text and "__resume_at_" in text
    assert "TENSOR_MATCH" in text
    assert "Strata produced 2 graphs, with 1 graph break" in text
    assert "speedup over eager:" in text
    # The toy example's source, resume functions with the user's lines, readable guards, and
    # torch.compile's figure beside Strata's.
    assert "def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:" in text
    assert "RESUME FUNCTION" in text and "<lambda>" not in text
    assert "__strata_callback" not in text and "COMPILE_CONTEXT" in text
    assert "torch.compile median:" in text
    assert "SECTION FAILED" not in text
