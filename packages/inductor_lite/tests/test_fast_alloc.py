"""fast_alloc: the CPU wrapper's buffers and views made in C++ must be what
``torch.empty_strided`` and ``as_strided`` give (layout, dtype, memory, version counter, errors),
fall back to ``as_strided`` wherever the shortcut could differ, and compiled graphs must give
eager's results with the extension and without it."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from inductor_lite import InductorConfig, fast_alloc
from inductor_lite.fast_alloc import fast_alloc_module


@pytest.fixture(scope="module")
def fa() -> ModuleType:
    if os.environ.get("STRATA_FAST_ALLOC") == "0":
        pytest.skip("STRATA_FAST_ALLOC=0")
    module = fast_alloc_module()
    assert module is not None, f"the extension did not build: {fast_alloc.build_error[0]}"
    return module


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_empty_has_the_layout_and_dtype_asked_for(fa: ModuleType, dtype: torch.dtype) -> None:
    for sizes, strides in [
        ((2, 17, 32), (544, 32, 1)),
        ((4, 3), (1, 4)),
        ((), ()),
        ((0, 5), (5, 1)),
    ]:
        t = fa.empty(sizes, strides, dtype)
        want = torch.empty_strided(sizes, strides, dtype=dtype)
        assert (t.shape, t.stride(), t.dtype, t.device) == (
            want.shape,
            want.stride(),
            want.dtype,
            want.device,
        )
        assert type(t) is torch.Tensor and not t.requires_grad
        t.fill_(3)  # its memory is its own
        assert bool((t == 3).all())


def test_empty_refuses_bad_arguments(fa: ModuleType) -> None:
    with pytest.raises(TypeError):
        fa.empty((2,), (1,), "float32")
    with pytest.raises(ValueError, match="differ in length"):
        fa.empty((2, 3), (1,), torch.float32)
    with pytest.raises(TypeError):
        fa.empty((2.5,), (1,), torch.float32)


@pytest.mark.parametrize(
    ("sizes", "strides", "offset"),
    [((3, 4), (4, 1), 2), ((4, 3), (1, 4), 0), ((2, 2, 2), (8, 1, 2), 5), ((0, 3), (3, 1), 7)],
)
def test_view_is_as_strided_on_the_same_memory(
    fa: ModuleType, sizes: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> None:
    base = torch.arange(40.0)[3:]  # a storage offset of its own: the view's offset adds to it
    got = fa.view(base, sizes, strides, offset)
    want = base.as_strided(sizes, strides, base.storage_offset() + offset)
    assert (got.shape, got.stride(), got.storage_offset()) == (
        want.shape,
        want.stride(),
        want.storage_offset(),
    )
    assert got.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(got, want)
    assert got.is_contiguous() == want.is_contiguous()


def test_a_write_through_the_view_bumps_the_base_version(fa: ModuleType) -> None:
    base = torch.zeros(12)
    view = fa.view(base, (3, 4), (4, 1), 0)
    before = base._version
    view.add_(1)
    assert base._version == before + 1
    assert float(base.sum()) == 12.0


def test_a_view_beyond_the_storage_raises_as_as_strided_does(fa: ModuleType) -> None:
    base = torch.zeros(12)
    with pytest.raises(RuntimeError, match="out of bounds"):
        fa.view(base, (5, 5), (5, 1), 0)
    with pytest.raises(RuntimeError):
        fa.view(base, (2,), (1,), -1)


def test_a_view_needing_autograd_is_an_autograd_view(fa: ModuleType) -> None:
    leaf = torch.randn(4, 4, requires_grad=True)
    view = fa.view(leaf, (2, 2), (4, 1), 1)
    assert view.requires_grad and view.grad_fn is not None
    view.sum().backward()
    assert leaf.grad is not None and float(leaf.grad.sum()) == 4.0
    with torch.no_grad():
        plain = fa.view(leaf, (2, 2), (4, 1), 1)
    assert not plain.requires_grad and torch.equal(plain, leaf.detach()[0:2, 1:3])


def test_a_tensor_subclass_goes_through_as_strided(fa: ModuleType) -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    a, b = torch.arange(12.0), torch.arange(12.0) * 10
    got = fa.view(TwoTensor(a, b), (3, 4), (4, 1), 0)
    assert isinstance(got, TwoTensor)  # its __torch_dispatch__ ran as_strided on both halves
    assert torch.equal(got.a, a.view(3, 4)) and torch.equal(got.b, b.view(3, 4))


def _graph(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.sin(x) * 2  # leaves the call: allocated per call
    y = (h.view(-1, 8) @ w).relu()  # a view of a buffer handed to mm
    return h, y.t().contiguous() + 1


@pytest.mark.parametrize("fast", [True, False])
def test_a_cpu_graph_gives_eager_results_with_and_without_the_extension(
    config: InductorConfig, check: Any, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if fast:
        if fast_alloc_module() is None:
            pytest.fail(f"the extension did not build: {fast_alloc.build_error[0]}")
    else:
        monkeypatch.setattr(fast_alloc, "_loaded", [None])
    x, w = torch.randn(4, 6, 8), torch.randn(8, 5)
    c = check(_graph, [x, w], atol=1e-5, rtol=1e-5)
    allocs = [line for line in c.wrapper_source.splitlines() if "= _empty(" in line]
    assert allocs, c.wrapper_source
    assert all(("device=_dev" in line) != fast for line in allocs), allocs
    # each call's outputs are fresh memory: a second call leaves the first call's results
    first = c(x, w)
    kept = [t.clone() for t in first]
    c(torch.randn(4, 6, 8), w)
    assert all(torch.equal(a, b) for a, b in zip(first, kept, strict=True))


def test_a_dispatch_mode_sees_the_allocations_and_views(fa: ModuleType) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    base = torch.arange(12.0)
    with Seen() as seen:
        t = fa.empty((2, 3), (3, 1), torch.float32)
        v = fa.view(base, (3, 4), (4, 1), 0)
    assert any("empty_strided" in op for op in seen.ops), seen.ops
    assert any("as_strided" in op for op in seen.ops), seen.ops
    assert t.shape == (2, 3) and torch.equal(v, base.view(3, 4))


def _fake_compiler(folder: Path, script: str) -> str:
    path = folder / "fake-c++"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_a_compiler_whose_library_does_not_load_gives_way_to_the_next(
    fa: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a compiler newer than the process's libstdc++ builds a library that fails at load: the
    # fake one "builds" a file that is no library at all
    fake = _fake_compiler(
        tmp_path, 'for a; do [ "$prev" = -o ] && echo junk > "$a"; prev=$a; done; exit 0\n'
    )
    real_folder = fast_alloc._folder
    monkeypatch.setattr(
        fast_alloc, "_folder", lambda c: tmp_path / "fake" if c == fake else real_folder(c)
    )
    monkeypatch.setenv("CXX", fake)
    monkeypatch.setattr(fast_alloc, "_loaded", [])
    monkeypatch.setattr(fast_alloc, "build_error", [""])
    module = fast_alloc_module()
    assert (tmp_path / "fake" / "_strata_fast_alloc.so").read_text() == "junk\n"  # tried first
    assert module is not None and fast_alloc.build_error[0] == ""
    t = module.empty((2, 3), (3, 1), torch.float32)
    assert t.shape == (2, 3) and t.stride() == (3, 1)


def test_without_a_working_compiler_the_wrapper_keeps_torch_calls_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: InductorConfig, check: Any
) -> None:
    fake = _fake_compiler(tmp_path, "echo 'fatal error: no such header' >&2; exit 1\n")
    monkeypatch.setattr(fast_alloc, "_compilers", lambda: [fake])
    monkeypatch.setattr(fast_alloc, "_folder", lambda c: tmp_path / "fake")
    monkeypatch.setattr(fast_alloc, "_loaded", [])
    monkeypatch.setattr(fast_alloc, "build_error", [""])
    assert fast_alloc_module() is None
    assert fake in fast_alloc.build_error[0] and "no such header" in fast_alloc.build_error[0]
    # the wrapper then allocates through torch, with eager's results
    c = check(_graph, [torch.randn(4, 6, 8), torch.randn(8, 5)], atol=1e-5, rtol=1e-5)
    allocs = [line for line in c.wrapper_source.splitlines() if "= _empty(" in line]
    assert allocs and all("device=_dev" in line for line in allocs), allocs
    monkeypatch.setattr(fast_alloc, "_compilers", list)
    monkeypatch.setattr(fast_alloc, "_loaded", [])
    assert fast_alloc_module() is None and "no C++ compiler" in fast_alloc.build_error[0]
