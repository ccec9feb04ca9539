"""The on-disk kernel cache: reuse across processes, and distrust of bad entries."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.fx

from inductor_lite import CompiledGraph, InductorConfig, compile_fx
from inductor_lite.cache import cache_key, ensure_private_dir


def _fn(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * 3 + 1) * x


def _compile(cache: Path) -> CompiledGraph:
    config = InductorConfig(cache_dir=cache, fallback="raise", use_aot=False)
    c = compile_fx(torch.fx.symbolic_trace(_fn), [torch.randn(4, 5)], config=config)
    assert isinstance(c, CompiledGraph)
    return c


def _entry(cache: Path, c: CompiledGraph) -> Path:
    config = InductorConfig(cache_dir=cache)
    # a source that declares libm's functions vectorisable is linked with libmvec
    libs = ("-lmvec",) if "declare simd" in c.kernel_source else ()
    return cache / f"{cache_key(c.kernel_source, config, libs)}.so"


_CHILD = textwrap.dedent(
    """
    import sys, torch, torch.fx
    from inductor_lite import InductorConfig, compile_fx
    def _fn(x):
        return torch.tanh(x * 3 + 1) * x
    cfg = InductorConfig(cache_dir=sys.argv[1], fallback="raise", use_aot=False)
    c = compile_fx(torch.fx.symbolic_trace(_fn), [torch.randn(4, 5)], config=cfg)
    x = torch.randn(4, 5)
    assert torch.allclose(c(x), _fn(x), atol=1e-6)
    print("HIT" if c.cache_hit else "MISS")
    """
)


def test_second_process_reuses_compiled_kernels(tmp_path: Path) -> None:
    first = _compile(tmp_path)
    assert not first.cache_hit
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "HIT"


def test_cache_dir_is_created_private(tmp_path: Path) -> None:
    d = ensure_private_dir(tmp_path / "a" / "cache")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_corrupt_entry_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    c = _compile(tmp_path)
    so = _entry(tmp_path, c)
    so.write_bytes(b"not a shared library")
    again = _compile(tmp_path)
    assert not again.cache_hit
    x = torch.randn(4, 5)
    torch.testing.assert_close(again(x), _fn(x))
    assert so.read_bytes()[:4] == b"\x7fELF"


def test_tampered_library_with_stale_digest_is_rebuilt(tmp_path: Path) -> None:
    c = _compile(tmp_path)
    so = _entry(tmp_path, c)
    data = bytearray(so.read_bytes())
    data[-1] ^= 0xFF  # still loads as ELF perhaps, but no longer what we built
    so.write_bytes(bytes(data))
    assert not _compile(tmp_path).cache_hit


def test_group_writable_entry_is_ignored(tmp_path: Path) -> None:
    c = _compile(tmp_path)
    so = _entry(tmp_path, c)
    os.chmod(so, 0o666)
    again = _compile(tmp_path)
    assert not again.cache_hit
    assert not stat.S_IMODE(os.stat(so).st_mode) & 0o022


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_foreign_owned_entry_is_ignored(tmp_path: Path) -> None:
    c = _compile(tmp_path)
    so = _entry(tmp_path, c)
    os.chown(so, 12345, 12345)
    again = _compile(tmp_path)
    assert not again.cache_hit
    assert os.stat(so).st_uid == os.getuid()


def test_key_changes_with_compiler_flags(tmp_path: Path) -> None:
    a = InductorConfig(cache_dir=tmp_path)
    b = InductorConfig(cache_dir=tmp_path, cflags=(*a.cflags, "-DSTRATA_TEST"))
    assert cache_key("x", a) != cache_key("x", b)
