"""A program that compiled something exits: nothing of Strata's runs for ever at interpreter
exit (a reset watcher re-armed itself in weakref's exit loop and hung every such script)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import torch
import compile_api

def f(x):
    return x + 1

print(compile_api.compile(f, backend="eager")(torch.ones(1)).item())
"""


def test_a_script_that_compiled_a_function_exits_promptly() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.0"
