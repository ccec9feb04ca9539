"""Compiling C++ to a shared library, through a safe on-disk cache.

An entry is ``<key>.so`` plus ``<key>.sha256`` (the library's digest), where ``key``
hashes the source, the compiler command line and the compiler's version. An entry is
only loaded when both files are regular files owned by this user, not writable by group
or others, and the digest matches; anything else is rebuilt over it. Writes go to a
temporary file in the same directory and are renamed into place, so a reader never
sees half a library.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import math
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import InductorConfig
from .errors import CompilerError

__all__ = [
    "LoadedLibrary",
    "cache_key",
    "compiler_version",
    "ensure_private_dir",
    "libmvec_available",
    "load_library",
    "read_choices",
    "store_choice",
]

log = logging.getLogger("strata.inductor_lite")


@functools.lru_cache(maxsize=8)
def compiler_version(cxx: str) -> str:
    """The first line of ``cxx --version`` (part of every cache key)."""
    try:
        out = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompilerError(f"C++ compiler {cxx!r} is not usable: {exc}") from exc
    return out.stdout.splitlines()[0] if out.stdout else cxx


def cache_key(source: str, config: InductorConfig, libs: tuple[str, ...] = ()) -> str:
    """Hash of source, compiler, flags and compiler version."""
    h = hashlib.sha256()
    flags = " ".join((*config.cflags, *libs))
    for part in (source, config.cxx, flags, compiler_version(config.cxx)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _trusted(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def ensure_private_dir(path: Path) -> Path:
    """``path`` created with mode 0700; a directory we cannot trust is replaced by a temp dir."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            if st.st_mode & 0o077:
                os.chmod(path, 0o700)
            return path
    except OSError as exc:
        log.warning("kernel cache dir %s unusable (%s)", path, exc)
    fresh = Path(tempfile.mkdtemp(prefix="strata-inductor-"))
    log.warning("kernel cache dir %s is not ours; using %s for this process", path, fresh)
    return fresh


def read_choices(path: Path, valid: Callable[[str], bool]) -> dict[str, str]:
    """A measured-choice file beside the kernels (key -> choice, JSON): empty when it is
    missing, not ours or unreadable; entries whose choice ``valid`` rejects are dropped."""
    if not _trusted(path):
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and valid(v)}


def store_choice(directory: Path, path: Path, key: str, choice: str) -> None:
    """Add ``key -> choice`` to the file, re-read first (another process may have added
    entries meanwhile); a write that fails only costs the measurement again next time."""
    known = read_choices(path, lambda _: True)
    known[key] = choice
    try:
        _atomic_write(directory, path, json.dumps(known, indent=0).encode())
    except OSError as exc:
        log.debug("choice cache %s not written: %s", path.name, exc)


def _atomic_write(directory: Path, final: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class LoadedLibrary:
    lib: ctypes.CDLL
    path: Path
    cache_hit: bool


def _read_valid_entry(so: Path, digest: Path) -> bytes | None:
    """The library's bytes when the entry is trusted and intact, else None."""
    if not (_trusted(so) and _trusted(digest)):
        return None
    try:
        data = so.read_bytes()
        expected = digest.read_text().strip()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == expected else None


def _load_private_copy(data: bytes, key: str) -> ctypes.CDLL:
    """dlopen a private copy of exactly the bytes that were checked.

    Loading the cache file itself would leave a window between the check and the load,
    and a library mapped from a file that someone later rewrites in place crashes us.
    """
    fd, tmp = tempfile.mkstemp(prefix=f"strata-{key[:12]}-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)  # the mapping stays valid after unlink


def load_library(source: str, config: InductorConfig, libs: tuple[str, ...] = ()) -> LoadedLibrary:
    """Load the library for ``source``, compiling it unless a valid cache entry exists.

    ``libs`` are linker arguments placed after the source (``-lmvec``).
    """
    directory = ensure_private_dir(config.cache_dir)
    key = cache_key(source, config, libs)
    so = directory / f"{key}.so"
    digest = directory / f"{key}.sha256"
    data = _read_valid_entry(so, digest)
    if data is not None:
        try:
            return LoadedLibrary(_load_private_copy(data, key), so, True)
        except OSError as exc:
            log.warning("cached kernel %s failed to load (%s); rebuilding", so, exc)
    elif so.exists() or digest.exists():
        log.warning("ignoring untrusted or corrupt cache entry %s; rebuilding", so)
    data = _build(source, config, directory, so, digest, libs)
    try:
        return LoadedLibrary(_load_private_copy(data, key), so, False)
    except OSError as exc:
        raise CompilerError(f"compiled library {so} does not load: {exc}") from exc


def _build(  # noqa: PLR0917
    source: str,
    config: InductorConfig,
    directory: Path,
    so: Path,
    digest: Path,
    libs: tuple[str, ...] = (),
) -> bytes:
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as work:
        cpp = Path(work) / "kernels.cpp"
        cpp.write_text(source)
        out = Path(work) / "kernels.so"
        cmd = [config.cxx, *config.cflags, str(cpp), "-o", str(out), *libs]
        log.debug("compiling: %s", " ".join(cmd))
        try:
            proc = subprocess.run(
                cmd, check=False, capture_output=True, text=True, timeout=config.compile_timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            raise CompilerError(
                f"C++ compiler timed out after {config.compile_timeout_s}s"
            ) from exc
        except OSError as exc:
            raise CompilerError(f"cannot run {config.cxx}: {exc}") from exc
        if proc.returncode != 0:
            raise CompilerError(f"C++ compiler failed:\n{proc.stderr[-4000:]}")
        data = out.read_bytes()
    _atomic_write(directory, so, data)
    _atomic_write(directory, digest, hashlib.sha256(data).hexdigest().encode())
    return data


_PROBE_BODY = r"""
#include <cmath>
#include <cstdint>
%s
extern "C" void probe(const float* x, float* out, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
        out[i] = %s;
    }
}
"""


@functools.cache
def _probe_libmvec(cxx: str, cflags: tuple[str, ...]) -> bool:
    # A shared object links even with unresolved symbols, so the probe is also loaded and run:
    # a libmvec without one of the declared variants fails here, not in a user's graph.
    from .cpp_prelude import LIBMVEC_DECLS, LIBMVEC_FUNCTIONS

    terms = [
        f"std::{name}(x[i]{', x[i]' if arity == 2 else ''})" for name, arity in LIBMVEC_FUNCTIONS
    ]
    source = _PROBE_BODY % (LIBMVEC_DECLS, " + ".join(terms))
    try:
        with tempfile.TemporaryDirectory(prefix="strata-libmvec-") as work:
            cpp = Path(work) / "probe.cpp"
            cpp.write_text(source)
            out = Path(work) / "probe.so"
            proc = subprocess.run(
                [cxx, *cflags, str(cpp), "-o", str(out), "-lmvec"],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if proc.returncode != 0:
                log.info("libmvec not usable (%s); sin/cos/log stay scalar", proc.stderr[-500:])
                return False
            lib = ctypes.CDLL(str(out))
            n = 16
            xs = (ctypes.c_float * n)(*[0.25 + 0.01 * i for i in range(n)])
            ys = (ctypes.c_float * n)()
            lib.probe(xs, ys, ctypes.c_int64(n))
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("libmvec not usable (%s); sin/cos/log stay scalar", exc)
        return False
    return not any(math.isnan(y) for y in ys)


def libmvec_available(config: InductorConfig) -> bool:
    """Whether kernels can call glibc's vector math (libmvec) with ``config``'s compiler.

    Probed once per compiler and flags: compiled, loaded and run.
    """
    return _probe_libmvec(config.cxx, config.cflags)
