"""Shared fixtures of the bytecode toolkit tests; also lets them run on interpreters without torch.

``symbolic_vm/__init__.py`` is meant to import torch lazily. If on this interpreter it cannot be
imported (no torch), the package shell is registered without running it: ``symbolic_vm.bytecode``
depends on nothing else in ``symbolic_vm``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def _make_bytecode_importable() -> None:
    try:
        import symbolic_vm.bytecode  # noqa: F401
    except ImportError:
        for name in [m for m in sys.modules if m.split(".")[0] == "symbolic_vm"]:
            del sys.modules[name]
        spec = importlib.util.find_spec("symbolic_vm")
        assert spec is not None and spec.submodule_search_locations is not None
        shell = types.ModuleType("symbolic_vm")
        shell.__path__ = list(spec.submodule_search_locations)
        sys.modules["symbolic_vm"] = shell


_make_bytecode_importable()
# The shared helpers live in bytecode_testing.py next to this file (tests import them by name).
sys.path.insert(0, os.path.dirname(__file__))
