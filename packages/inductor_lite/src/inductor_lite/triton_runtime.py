"""Loading generated Triton source and launching its kernels, with a small autotuner.

triton is imported here only, and only when a graph is compiled for Triton.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

from .errors import CompilerError
from .symbolic import is_static, pyexpr
from .triton_codegen import TritonKernelSource, block_candidates

__all__ = ["TritonLauncher", "load_triton_module", "triton_kernels"]

log = logging.getLogger("strata.inductor_lite")


def load_triton_module(source: str) -> ModuleType:
    """Import the generated module (``@triton.jit`` needs a real file to read its source)."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise CompilerError("triton is not installed (pip install triton)") from exc
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    directory = Path(tempfile.mkdtemp(prefix="strata-triton-"))  # private, mode 0700
    path = directory / f"strata_triton_{digest}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"strata_triton_{digest}", path)
    if spec is None or spec.loader is None:
        raise CompilerError(f"cannot import generated Triton module {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec_key(args: tuple[object, ...]) -> tuple[object, ...] | None:
    """What triton's JIT specialises a kernel on, for the arguments we pass: a tensor's dtype
    and whether its data is 16-byte aligned; an int's value when it is 1, else whether it is a
    multiple of 16, and which integer type holds it. None when an argument is of another kind
    (no direct launch then)."""
    key: list[object] = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            key.append((arg.dtype, arg.data_ptr() % 16 == 0))
        elif type(arg) is int:  # and its integer type: i32, i64 or u64 by range
            key.append((arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31, arg < 2**63))
        else:
            return None
    return tuple(key)


def _raw_stream(device: int) -> int:
    """The current CUDA stream's handle (what triton's driver itself reads, without building a
    ``torch.cuda.Stream`` object per launch)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None:
        return int(get(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _hooked(hook: object) -> bool:
    """Whether a triton launch hook would run: triton 3.6 keeps a ``HookChain`` (empty unless a
    profiler added to it) where older versions keep None or the hook itself."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


class _DirectLaunch:
    """A compiled kernel launched without triton's JIT entry point.

    ``fn[grid](*args)`` binds the arguments, recomputes the specialisation key and looks the
    kernel up on every call (~14 us of CPU per launch on the device machine, more than many of
    our kernels take on the GPU). After a launch through it we hold the compiled kernel, keyed
    by the arguments' specialisation key (``_spec_key``), and call its launcher directly while
    the current device is the one it was made on and no launch hooks are installed in triton
    (profilers install them); anything else goes back through the JIT entry point.
    """

    def __init__(self, kernel: Any, cfg: tuple[int, int], device: int) -> None:
        from triton import knobs

        self.run = kernel.run  # loads the binary on first access
        self.function = kernel.function
        self.metadata = kernel.packed_metadata
        self.cfg = cfg
        self.device = device
        self.hooks = knobs.runtime

    @classmethod
    def of(cls, kernel: Any, cfg: tuple[int, int]) -> _DirectLaunch | None:
        """None for the interpreter, or a triton whose compiled kernels look different."""
        if kernel is None or not hasattr(kernel, "packed_metadata"):
            return None
        try:
            direct = cls(kernel, cfg, torch.cuda.current_device())
        except Exception:  # pragma: no cover - the JIT path keeps working
            return None
        return direct if direct.run is not None and direct.function is not None else None

    def usable(self) -> bool:
        hooks = self.hooks
        if _hooked(hooks.launch_enter_hook) or _hooked(hooks.launch_exit_hook):
            return False
        return torch.cuda.current_device() == self.device

    def launch(self, grid: int, args: tuple[torch.Tensor, ...]) -> None:
        self.run(
            grid, 1, 1, _raw_stream(self.device), self.function, self.metadata, None, None, None,
            *args, self.cfg[0], self.cfg[1],
        )  # fmt: skip


class TritonLauncher:
    """Launches one kernel; the first call times each block-size candidate and keeps the best."""

    def __init__(
        self,
        fn: Any,
        src: TritonKernelSource,
        key: tuple[str, str],
        choices: dict[tuple[str, str], tuple[int, int]],
        compile_threads: int = 8,
    ) -> None:
        self.fn = fn
        self.compile_threads = compile_threads
        self.src = src
        self.key = key
        self.choices = choices
        # compiled kernels launched directly, by specialisation key (see _DirectLaunch)
        self._fast: dict[tuple[object, ...], _DirectLaunch] = {}
        self._direct = True
        self._rows = _rows_of(src)

    def _grid(self, cfg: tuple[int, int], tensors: tuple[torch.Tensor, ...]) -> int:
        return (self._rows(tensors) + cfg[0] - 1) // cfg[0]

    def _launch(self, cfg: tuple[int, int], tensors: tuple[torch.Tensor, ...]) -> Any:
        """Launch through triton's JIT entry point; returns its compiled kernel (None when
        interpreted)."""
        xblock, rblock = cfg
        return self.fn[(self._grid(cfg, tensors),)](*tensors, XBLOCK=xblock, RBLOCK=rblock)

    def _time(self, cfg: tuple[int, int], tensors: tuple[torch.Tensor, ...], cuda: bool) -> float:
        """Seconds per launch of one block-size candidate (already compiled and warm)."""
        if cuda:
            # triton's benchmark helper times the kernel on the GPU with CUDA events and a
            # cache flush before each run: wall-clock timing of a few launches measures the
            # Python launch path instead, and picks block sizes at random for small kernels
            from triton.testing import do_bench

            return float(do_bench(lambda: self._launch(cfg, tensors), warmup=2, rep=10)) / 1e3
        t0 = time.perf_counter()
        for _ in range(3):
            self._launch(cfg, tensors)
        return time.perf_counter() - t0

    def _candidates(self, tensors: tuple[torch.Tensor, ...]) -> list[tuple[int, int]]:
        return block_candidates(
            self._rows(tensors), self.src.max_inner, self.src.persistent, self.src.pointwise
        )

    def _tune(self, tensors: tuple[torch.Tensor, ...]) -> tuple[int, int]:
        cands = self._candidates(tensors)
        if len(cands) == 1:  # nothing to choose: the launch that follows compiles it
            return cands[0]
        # timing launches the kernel many times: one that writes a buffer it also reads (an
        # input updated in place, p = p - lr * g) would apply itself that often, so what it
        # writes is put back as it was before the real launch
        written = [
            t for name, t in zip(self.src.params, tensors, strict=False) if name in self.src.stores
        ]
        saved = [t.clone() for t in written]
        try:
            return self._tune_blocks(tensors)
        finally:
            for t, s in zip(written, saved, strict=True):
                t.data.copy_(s)  # through .data: no version bump, no autograd

    def _tune_blocks(self, tensors: tuple[torch.Tensor, ...]) -> tuple[int, int]:
        cands = self._candidates(tensors)
        cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors)
        if cuda and len(cands) > 1 and self.compile_threads > 1:
            _compile_in_parallel(self.fn, cands, tensors, self.compile_threads)
        best: tuple[float, tuple[int, int]] | None = None
        failures: list[str] = []
        for cfg in cands:
            try:
                self._launch(cfg, tensors)  # compile and warm up
            except Exception as exc:  # a block shape the device cannot take: try the next
                failures.append(f"{cfg}: {exc}")
                continue
            elapsed = self._time(cfg, tensors, cuda)
            if best is None or elapsed < best[0]:
                best = (elapsed, cfg)
        if best is None:
            raise CompilerError(
                f"no block size works for Triton kernel {self.src.name}: " + "; ".join(failures)
            )
        log.debug("autotuned %s: XBLOCK=%d RBLOCK=%d", self.src.name, *best[1])
        return best[1]

    def __call__(self, *tensors: torch.Tensor) -> None:
        key = _spec_key(tensors) if self._direct else None
        if key is not None:
            fast = self._fast.get(key)
            if fast is not None and fast.usable():
                fast.launch(self._grid(fast.cfg, tensors), tensors)
                return
        cfg = self.choices.get(self.key)
        first = cfg is None
        if cfg is None:
            cfg = self._tune(tensors)
            self.choices[self.key] = cfg
        try:
            kernel = self._launch(cfg, tensors)
        except Exception as exc:
            if not first:
                raise
            # an untimed block size (a pointwise kernel's) is compiled here, not by the tuner
            self.choices.pop(self.key, None)
            raise CompilerError(
                f"Triton kernel {self.src.name} (XBLOCK={cfg[0]}, RBLOCK={cfg[1]}): {exc}"
            ) from exc
        if key is not None:
            fast = _DirectLaunch.of(kernel, cfg)
            if fast is None:
                self._direct = False  # interpreted: never look again
            else:
                self._fast[key] = fast


class _CompilePool:
    """The threads that compile a kernel's block-size candidates side by side.

    Each candidate is a separate Triton compile (XBLOCK and RBLOCK are compile-time
    constants), and compiling them one after the other was most of a large graph's compile
    time. Triton's compiler lets go of the interpreter lock in its passes and runs ptxas as a
    separate program, so threads overlap them; triton's own async-compile hook puts the
    results in the kernel's cache, where the launches that time them find them.
    """

    executors: ClassVar[dict[int, ThreadPoolExecutor]] = {}  # by thread count

    @classmethod
    def get(cls, threads: int) -> ThreadPoolExecutor:
        threads = max(1, min(threads, os.cpu_count() or 1))
        pool = cls.executors.get(threads)
        if pool is None:
            pool = cls.executors[threads] = ThreadPoolExecutor(
                threads, thread_name_prefix="strata-triton"
            )
        return pool


def _compile_in_parallel(
    fn: Any, cands: list[tuple[int, int]], tensors: tuple[torch.Tensor, ...], threads: int
) -> None:
    """Compile every candidate of ``fn`` for these arguments at once (best effort: one that
    fails here fails again, with its message, when the tuner launches it)."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # an older triton: the tuner compiles them one by one
        return
    try:
        with AsyncCompileMode(_CompilePool.get(threads), ignore_errors=True):
            for xblock, rblock in cands:
                fn.warmup(*tensors, grid=(1,), XBLOCK=xblock, RBLOCK=rblock)
    except Exception as exc:  # pragma: no cover - the serial path compiles what is missing
        log.debug("parallel compile of %s failed: %s", getattr(fn, "__name__", fn), exc)


def _rows_of(src: TritonKernelSource) -> Callable[[tuple[Any, ...]], int]:
    """The kernel's row count from its launch arguments (the symbols come last)."""
    rows = src.rows
    if is_static(rows):
        return lambda args: rows  # type: ignore[return-value]
    n = len(src.symbols)
    fn = eval(f"lambda {', '.join(src.symbols)}: {pyexpr(rows)}")
    return lambda args: int(fn(*args[len(args) - n :]))


def triton_kernels(
    source: str,
    sources: list[TritonKernelSource],
    choices: dict[tuple[str, str], tuple[int, int]],
    compile_threads: int = 8,
) -> dict[str, tuple[Callable[..., None], tuple[str, ...]]]:
    """Launchers for every kernel of a generated module, keyed by kernel name."""
    module = load_triton_module(source)
    digest = hashlib.sha256(source.encode()).hexdigest()
    return {
        s.name: (TritonLauncher(
            getattr(module, s.name), s, (digest, s.same_as or s.name), choices, compile_threads
        ), s.params)
        for s in sources
    }
