"""Faults injected into compilation: the user still gets eager's answer (or a clear error),
and the next call works."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

import compile_api
import evalframe


def _fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * y + 1


def _args() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.linspace(-1, 1, 6), torch.linspace(0, 2, 6)


class _Counting:
    """A backend that counts its compiles and otherwise runs the graph as captured."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        self.calls += 1
        return gm.forward


def _hook_is_off() -> bool:
    # Whatever happened in the call, no frame hook may be left installed behind the user.
    previous = evalframe.set_callback(None)
    evalframe.set_callback(previous)
    return previous is None


# ---- backends that fail ---------------------------------------------------------------------


def _raising_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    raise RuntimeError("injected backend failure")


def test_raising_backend_gives_eager_result_with_one_warning_and_next_call_works() -> None:
    compiled = compile_api.compile(_fn, backend=_raising_backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(compiled(*_args()), _fn(*_args()))
        assert torch.equal(compiled(*_args()), _fn(*_args()))
    assert sum("injected backend failure" in str(w.message) for w in caught) == 1
    assert _hook_is_off()


def test_raising_backend_with_suppress_errors_off_raises_backend_compiler_failed() -> None:
    compile_api.config.suppress_errors = False
    compiled = compile_api.compile(_fn, backend=_raising_backend)
    with pytest.raises(compile_api.BackendCompilerFailed, match="injected backend failure"):
        compiled(*_args())
    assert _hook_is_off()
    compile_api.config.suppress_errors = True
    good = _Counting()
    assert torch.equal(compile_api.compile(_fn, backend=good)(*_args()), _fn(*_args()))


def test_backend_returning_a_non_callable_runs_the_graph_eagerly() -> None:
    def not_callable(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return 42

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert torch.equal(compile_api.compile(_fn, backend=not_callable)(*_args()), _fn(*_args()))


def _wrong_arity_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    def takes_nothing() -> Any:
        return gm(*example_inputs)

    return takes_nothing


def test_backend_returning_wrong_arity_callable_gives_eager_result() -> None:
    compiled = compile_api.compile(_fn, backend=_wrong_arity_backend)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert torch.equal(compiled(*_args()), _fn(*_args()))


def test_backend_returning_wrong_arity_callable_raises_a_clear_type_error_then_recovers() -> None:
    # What the user sees today: the backend's own TypeError, naming the callable, and no hook
    # left behind; the same function compiled with a sound backend works on the next call.
    compiled = compile_api.compile(_fn, backend=_wrong_arity_backend)
    try:
        out = compiled(*_args())
    except TypeError as err:
        assert "takes_nothing" in str(err) or "positional" in str(err)
    else:
        assert torch.equal(out, _fn(*_args()))
    assert _hook_is_off()
    compile_api.reset()
    assert torch.equal(compile_api.compile(_fn, backend=_Counting())(*_args()), _fn(*_args()))


def test_keyboard_interrupt_in_backend_propagates_and_next_call_compiles() -> None:
    interrupt = {"armed": True}
    seen = _Counting()

    def interrupting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        if interrupt["armed"]:
            raise KeyboardInterrupt
        return seen(gm, example_inputs)

    compiled = compile_api.compile(_fn, backend=interrupting)
    with pytest.raises(KeyboardInterrupt):
        compiled(*_args())
    assert _hook_is_off()
    interrupt["armed"] = False
    assert torch.equal(compiled(*_args()), _fn(*_args()))
    assert torch.equal(compiled(*_args()), _fn(*_args()))
    assert seen.calls == 1


# ---- guards that raise ----------------------------------------------------------------------


class _Flaky:
    """An object whose attribute raises while ``broken`` is set."""

    broken = False

    @property
    def scale(self) -> float:
        if _Flaky.broken:
            raise RuntimeError("injected attribute failure")
        return 2.0


def _uses_scale(x: torch.Tensor, obj: _Flaky, use: bool) -> torch.Tensor:
    if use:
        return x * obj.scale
    return x - 1


@pytest.fixture
def flaky() -> Any:
    _Flaky.broken = False
    yield _Flaky()
    _Flaky.broken = False


def test_attribute_raising_on_the_path_raises_as_eager_then_next_call_works(flaky: _Flaky) -> None:
    compiled = compile_api.compile(_uses_scale, backend=_Counting())
    x = torch.arange(4.0)
    assert torch.equal(compiled(x, flaky, True), _uses_scale(x, flaky, True))
    _Flaky.broken = True
    with pytest.raises(RuntimeError, match="injected attribute failure"):
        _uses_scale(x, flaky, True)
    with pytest.raises(RuntimeError, match="injected attribute failure"):
        compiled(x, flaky, True)
    _Flaky.broken = False
    assert torch.equal(compiled(x, flaky, True), _uses_scale(x, flaky, True))


def test_guard_raising_off_the_eager_path_gives_eager_result(flaky: _Flaky) -> None:
    # Compiled with use=True the entry guards obj.scale; with use=False eager never reads it,
    # so a guard that raises must count as a miss, not as the user's error.
    compiled = compile_api.compile(_uses_scale, backend=_Counting())
    x = torch.arange(4.0)
    assert torch.equal(compiled(x, flaky, True), _uses_scale(x, flaky, True))
    _Flaky.broken = True
    assert torch.equal(compiled(x, flaky, False), _uses_scale(x, flaky, False))
    _Flaky.broken = False
    assert torch.equal(compiled(x, flaky, True), _uses_scale(x, flaky, True))


class _BadEq:
    """A constant-like key whose comparison raises."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("injected __eq__ failure")

    def __hash__(self) -> int:
        return hash(self.v)


def _reads_dict(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
    return x * d["scale"] + len(d)


def test_dict_keys_whose_eq_raises_give_eager_result() -> None:
    # The entry guards the dict's keys; a new dict whose user key's __eq__ raises makes the
    # key comparison raise inside the guard, which eager never does.
    backend = _Counting()
    compiled = compile_api.compile(_reads_dict, backend=backend)
    x = torch.arange(3.0)
    d = {_BadEq(1): 1.0, "scale": 2.0}
    for _ in range(2):
        assert torch.equal(compiled(x, d), _reads_dict(x, d))
    other = {_BadEq(2): 5.0, "scale": 3.0}
    assert torch.equal(compiled(x, other), _reads_dict(x, other))
    assert torch.equal(compiled(x, d), _reads_dict(x, d))
    assert backend.calls >= 1


# ---- the cache size limit ---------------------------------------------------------------------


def _scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    return x * k + 1


def test_cache_size_limit_runs_eagerly_past_the_limit_and_warns_once() -> None:
    compile_api.config.cache_size_limit = 2
    backend = _Counting()
    compiled = compile_api.compile(_scaled, backend=backend, dynamic=False)
    x = torch.arange(5.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(6):
            assert torch.equal(compiled(x, k), _scaled(x, k))
        for k in range(6):
            assert torch.equal(compiled(x, k), _scaled(x, k))
    assert backend.calls == 2
    assert sum("cache_size_limit" in str(w.message) for w in caught) == 1
    compile_api.reset()
    assert torch.equal(compiled(x, 9), _scaled(x, 9))
    assert backend.calls == 3


# ---- inductor_lite's kernel cache ------------------------------------------------------------


def _kernel(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2 + torch.cos(x)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "kernels"
    monkeypatch.setenv("STRATA_CACHE_DIR", str(directory))
    return directory


def _run_inductor(x: torch.Tensor) -> torch.Tensor:
    compile_api.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile_api.compile(_kernel, backend="inductor")(x)  # type: ignore[no-any-return]


def _intact(lib: Path) -> bool:
    import hashlib

    digest = lib.with_suffix(".sha256")
    return (
        digest.exists()
        and hashlib.sha256(lib.read_bytes()).hexdigest() == digest.read_text().strip()
    )


def test_corrupted_kernel_cache_files_are_rebuilt_and_results_stay_right(cache_dir: Path) -> None:
    x = torch.linspace(-3, 3, 64)
    expected = _kernel(x)
    torch.testing.assert_close(_run_inductor(x), expected)
    libraries = sorted(cache_dir.glob("*.so"))
    assert libraries, "inductor did not write a kernel to the configured cache"
    # 1: garbage in place of a library (its digest no longer matches)
    for lib in libraries:
        lib.write_bytes(b"\x7fELF garbage")
    torch.testing.assert_close(_run_inductor(x), expected)
    assert all(_intact(lib) for lib in libraries), "corrupt kernels were not rebuilt"
    # 2: garbage with a matching digest (passes the checksum, fails to load)
    import hashlib

    for lib in sorted(cache_dir.glob("*.so")):
        data = b"not a shared library at all"
        lib.write_bytes(data)
        lib.with_suffix(".sha256").write_text(hashlib.sha256(data).hexdigest())
    torch.testing.assert_close(_run_inductor(x), expected)
    # 3: a truncated library and a missing digest
    for lib in sorted(cache_dir.glob("*.so")):
        lib.write_bytes(lib.read_bytes()[:100])
        lib.with_suffix(".sha256").unlink()
    torch.testing.assert_close(_run_inductor(x), expected)
    assert all(_intact(lib) for lib in libraries)
    torch.testing.assert_close(_run_inductor(x), expected)


def test_kernel_cache_dir_that_cannot_be_created_still_gives_right_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A regular file where a parent directory should be: mkdir fails even for root.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("STRATA_CACHE_DIR", str(blocker / "kernels"))
    x = torch.linspace(-3, 3, 64)
    torch.testing.assert_close(_run_inductor(x), _kernel(x))
    torch.testing.assert_close(_run_inductor(x), _kernel(x))


_OUT_OF_DISK = textwrap.dedent(
    """
    import resource, signal, sys, warnings
    import torch, compile_api

    def kernel(x):
        return torch.relu(x) * 2 + torch.cos(x)

    x = torch.linspace(-3, 3, 64)
    expected = kernel(x)
    # Every file this process (and the C++ compiler it starts) writes stops at 4 KiB: EFBIG,
    # the way a full disk fails a write.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    inductor = compile_api.lookup_backend("inductor")
    calls = []

    def counting(gm, example_inputs):
        calls.append(gm)
        return inductor(gm, example_inputs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_api.compile(kernel, backend=counting)
        first = compiled(x)
        second = compiled(x)
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(second, expected)
    print("graphs", len(calls))
    print("OK")
    """
)


def test_kernel_cache_on_a_full_disk_still_gives_right_results(tmp_path: Path) -> None:
    env = dict(os.environ, STRATA_CACHE_DIR=str(tmp_path / "kernels"), TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", _OUT_OF_DISK], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")
    assert "graphs 1" in proc.stdout  # inductor really ran (and fell back) on the full disk
