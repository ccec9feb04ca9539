"""Build the C++ fast path at first use, against the torch installed now, and cache it.

A plain ``pip install packages/guards`` builds in an isolated environment where torch is not
importable, so setup.py declares no extension there; the wheel still ships the C++ sources
(``guards/_csrc``). The first guard compile that finds no extension builds it once with
``torch.utils.cpp_extension.load`` (a C++ compiler and ninja are needed) into
``$STRATA_CACHE_DIR/guards`` (else ``$XDG_CACHE_HOME/strata/guards``, else
``~/.cache/strata/guards``), in a folder named for the torch version, the Python ABI and the
sources' hash; later processes load it from there. ``STRATA_GUARDS_BUILD=0`` turns this off.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

__all__ = ["BUILD_ENV", "build_extension", "source_digest", "sources"]

#: Set to "0" to never build the extension at first use.
BUILD_ENV = "STRATA_GUARDS_BUILD"


def sources() -> list[Path]:
    """The extension's C++ sources: shipped in the package, or the source checkout's."""
    here = Path(__file__).resolve().parent
    for folder in (here / "_csrc", here.parent.parent / "csrc"):
        found = sorted(folder.glob("*.cpp"))
        if found:
            return found
    return []


def source_digest(cpp: list[Path]) -> str:
    """``d`` and the sha256 of the C++ sources and the headers beside them (setup.py computes
    the same): stamped into the build as ``source_digest`` so the loader can tell a build left
    from older sources."""
    digest = hashlib.sha256()
    for path in [*cpp, *sorted(cpp[0].parent.glob("*.h"))] if cpp else []:
        digest.update(path.read_bytes())
    return "d" + digest.hexdigest()


def _cache_root() -> Path:
    explicit = os.environ.get("STRATA_CACHE_DIR")
    if explicit:
        return Path(explicit) / "guards"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "strata" / "guards"


def build_extension() -> ModuleType:
    """Build (or load the cached build of) ``_tensor_guards``; raises when it cannot."""
    if os.environ.get(BUILD_ENV) == "0":
        raise RuntimeError(f"{BUILD_ENV}=0")
    cpp = sources()
    if not cpp:
        raise RuntimeError("the C++ sources are not installed")
    digest = source_digest(cpp)
    tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
    folder = _cache_root() / f"torch-{torch.__version__}-{tag}-{digest[1:17]}"
    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.glob("_tensor_guards*.so")):
        print(
            f"guards: building the C++ fast path against torch {torch.__version__} "
            f"(once; cached in {folder})",
            file=sys.stderr,
        )
    from torch.utils.cpp_extension import load

    module = load(
        name="_tensor_guards",
        sources=[str(p) for p in cpp],
        extra_cflags=[
            "-O2", "-g0", "-Wno-missing-field-initializers",
            f"-DSTRATA_GUARDS_SOURCE_DIGEST_ID={digest}",
        ],
        build_directory=str(folder),
        verbose=False,
    )
    assert isinstance(module, ModuleType)
    return module
