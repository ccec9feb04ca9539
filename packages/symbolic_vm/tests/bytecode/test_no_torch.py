"""The toolkit never needs torch: importing it with torch made unimportable works."""

from __future__ import annotations

import os
import subprocess
import sys

import symbolic_vm.bytecode


def test_bytecode_toolkit_imports_and_works_with_torch_blocked() -> None:
    # sys.modules["torch"] = None makes any "import torch" fail, in symbolic_vm/__init__.py too
    # (its contract: import torch lazily, so this subpackage stays torch-free).
    script = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "from symbolic_vm.bytecode import assemble, decode, codegen\n"
        "def f(x):\n"
        "    return [i * x for i in range(3)]\n"
        "assert assemble(decode(f.__code__), template=f.__code__) == f.__code__\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
    )
    package_dir = os.path.dirname(os.path.abspath(symbolic_vm.bytecode.__file__))
    src = os.path.dirname(os.path.dirname(package_dir))  # .../src, holding symbolic_vm/
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
