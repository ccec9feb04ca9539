"""Builds guards' optional C++ fast path against the installed torch; metadata is in pyproject.toml.

The extension is optional in both senses: without torch importable at build time (an isolated
build) no extension is declared, and a failed compile (no compiler, other torch headers) is a
warning, not an error (``optional=True``).  Either way the package works on its pure-Python
check path (guards/native.py logs why at DEBUG).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithSources(build_py):
    """Also ships the C++ sources as ``guards/_csrc``: an install that could not compile them
    (an isolated build without torch) builds them at first use (guards/build.py)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "guards" / "_csrc"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(Path("csrc").glob("*.cpp")) + sorted(Path("csrc").glob("*.h")):
            shutil.copy(source, target / source.name)


ext_modules: list[Any] = []
cmdclass: dict[str, Any] = {"build_py": BuildPyWithSources}
try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # torch not importable here: pure-Python package
    pass
else:
    # The sources' hash, as guards/build.py source_digest computes it: the loader rebuilds a
    # build whose stamp differs from the sources beside it (an in-place build left from older
    # sources would otherwise run with features missing).
    _digest = hashlib.sha256()
    for _path in sorted(Path("csrc").glob("*.cpp")) + sorted(Path("csrc").glob("*.h")):
        _digest.update(_path.read_bytes())
    ext_modules.append(
        CppExtension(
            "guards._tensor_guards",
            sources=[
                "csrc/tensor_guards.cpp", "csrc/module_calls.cpp", "csrc/weak_tuple.cpp",
                "csrc/dict_keys.cpp", "csrc/state_tree.cpp",
            ],
            # -O2 and no debug info: tensor_guards.cpp over a handful of torch headers,
            # the others plain CPython (DictGate, ModuleCallsCheck, WeakTuple, DictKeysCheck,
            # StateTree).
            extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-missing-field-initializers"],
            define_macros=[("STRATA_GUARDS_SOURCE_DIGEST_ID", "d" + _digest.hexdigest())],
            optional=True,
        )
    )
    # no_python_abi_suffix stays False: the .so name carries the interpreter ABI tag, so a
    # build for another Python is never imported by mistake.  use_ninja=False: two source files.
    cmdclass["build_ext"] = BuildExtension.with_options(use_ninja=False)

setup(ext_modules=ext_modules, cmdclass=cmdclass)
