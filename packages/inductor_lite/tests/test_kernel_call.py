"""kernel_call: compiled kernels called by address through a small extension instead of ctypes
must pass every argument as the ctypes call does (pointers, negative int64s, None as NULL),
for every arity up to MAX_ARGS, and refuse a wrong call."""

from __future__ import annotations

import ctypes
import gc
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import torch

from inductor_lite import InductorConfig, compile_fx
from inductor_lite.kernel_call import MAX_ARGS, fast_kernel, kernel_call_module


@pytest.fixture(scope="module")
def module() -> ModuleType:
    config = InductorConfig()
    mod = kernel_call_module(config.cache_dir, config.cxx)
    if mod is None:
        pytest.skip("the kernel call extension cannot be built here")
    return mod


def _echo_library(tmp: Path, arities: list[int]) -> ctypes.CDLL:
    """echo<n>(int64_t* out, n-1 more int64 args): stores its other arguments into out."""
    lines = ["#include <stdint.h>"]
    for n in arities:
        params = ", ".join(["int64_t* out", *(f"int64_t a{i}" for i in range(1, n))])
        body = " ".join(f"out[{i - 1}] = a{i};" for i in range(1, n))
        lines.append(f'extern "C" void echo{n}({params}) {{ {body} }}')
    src = tmp / "echo.cpp"
    src.write_text("\n".join(lines) + "\n")
    lib = tmp / "echo.so"
    subprocess.run(
        [InductorConfig().cxx, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True
    )
    return ctypes.CDLL(str(lib))


def test_every_arity_passes_its_arguments_as_ctypes_does(
    module: ModuleType, tmp_path: Path
) -> None:
    arities = [1, 2, 3, 6, 7, 8, 9, 17, MAX_ARGS]
    lib = _echo_library(tmp_path, arities)
    for n in arities:
        fn = getattr(lib, f"echo{n}")
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * (n - 1)
        fast = fast_kernel(fn, n, module)
        assert fast is not fn
        values = [(-1) ** i * (i * 7919 + (1 << 40 if i % 3 == 0 else 0)) for i in range(1, n)]
        got = torch.zeros(max(n - 1, 1), dtype=torch.int64)
        fast(got.data_ptr(), *values)
        want = torch.zeros_like(got)
        fn(want.data_ptr(), *values)
        assert got.tolist() == want.tolist()
        assert got[: n - 1].tolist() == values


def test_a_wrong_call_raises_instead_of_calling(module: ModuleType, tmp_path: Path) -> None:
    lib = _echo_library(tmp_path, [3])
    fn = lib.echo3
    fast = fast_kernel(fn, 3, module)
    out = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(TypeError):
        fast(out.data_ptr(), 1)
    with pytest.raises(TypeError):
        fast(out.data_ptr(), 1, "two")
    fast(out.data_ptr(), None, -5)  # None is NULL, as a c_void_p argument takes it
    assert out.tolist() == [0, -5]


def test_a_wider_kernel_keeps_its_ctypes_call(module: ModuleType, tmp_path: Path) -> None:
    lib = _echo_library(tmp_path, [2])
    assert fast_kernel(lib.echo2, MAX_ARGS + 1, module) is lib.echo2


def test_compiled_kernels_run_through_it_and_match_eager(module: ModuleType) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x.sin() + y).relu() * 2, (x[:, None] * y).sum(0)

    def calls() -> int:
        return sum(type(o) is module.KernelCall for o in gc.get_objects())

    torch.manual_seed(0)
    x, y = torch.randn(33), torch.randn(33)
    before = calls()
    compiled = torch.compile(f, backend=compile_fx)
    for got, want in zip(compiled(x, y), f(x, y), strict=True):
        torch.testing.assert_close(got, want)
    assert calls() > before
