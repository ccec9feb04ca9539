"""The behaviour corpus's tests: ``benchmarks.zoo`` (torch's break counter) is importable from
the repository root, ``torch_reference`` (from which torch torch.compile is the reference) from
symbolic_vm's tests, which share it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "packages" / "symbolic_vm" / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
