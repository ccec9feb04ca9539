"""Matmuls under ``mode="max-autotune"``: a Triton template or aten's matmul, by measurement.

For each aten ``mm``/``addmm``/``bmm`` of a CUDA graph with static sizes (``triton_matmul``
finds them, with the pointwise consumer it can fuse), every tile config of the template (the
consumer fused) is timed against what runs otherwise -- aten's matmul (cuBLAS) followed by the
consumer's own kernel -- on random data of the real shapes, dtypes and strides. The fastest
wins; a template is taken only when it beats aten, never on a tie. The answer is kept in
``matmul_choices.json`` in the kernel cache directory, keyed by the template's source (shapes,
strides, dtypes and the consumer's body are all in it), the device's name and the Triton and
torch versions, so a problem is timed once per machine; every decision, with its times or why
there was none (size symbols: aten), is a line on the ``strata.kernel_choices`` log channel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import torch

from .cache import ensure_private_dir, read_choices, store_choice
from .choices import choice as choice_log
from .config import InductorConfig
from .errors import LoweringError
from .ir import FallbackNode, LoweredGraph, TensorRef
from .scheduler import ScheduleItem
from .triton_matmul import (
    MatmulProblem,
    TemplateMatmul,
    TileConfig,
    configs_for,
    find_matmuls,
    template_source,
)

__all__ = ["TIMER", "Timer", "autotune_matmuls", "select"]

log = logging.getLogger("strata.inductor_lite")

# (the candidate's label: "aten" or a tile config's, its warm callable) -> seconds per call
Timer = Callable[[str, Callable[[], object]], float]
# Tests set this to time without a GPU; None: CUDA events (``_cuda_timer``) on CUDA, and no
# measurement (aten kept) elsewhere.
TIMER: Timer | None = None

# part of every key: bumped when what is timed or generated changes
_KEY_VERSION = 1
_FILE = "matmul_choices.json"
_ATEN = "aten"
_MEMO: dict[tuple[Path, str], str] = {}
_MODULES: dict[str, ModuleType] = {}  # template source -> its loaded module (compiled once)
_NAME = "matmul_template"
# a template is chosen only when faster than this fraction of aten's time: two timings of one
# kernel differ by about a percent, and a template within that of aten is no gain worth a risk
_MARGIN = 0.98


def _cuda_timer(label: str, fn: Callable[[], object]) -> float:
    """The larger of two per-call times: triton's ``do_bench`` (the median of CUDA-event timings
    with L2 flushed before each call: the GPU's time with the weights cold, as in a model) and
    back-to-back calls (what a caller waits when the launches' CPU time is the bottleneck, as
    without CUDA graphs). A template that wins on the GPU but loses in launch cost is not
    chosen."""
    from triton.testing import do_bench

    cold = float(do_bench(fn, warmup=5, rep=25, return_mode="median")) / 1e3
    reps = int(min(200, max(5, 1e-3 / max(cold, 1e-7))))  # rounds of about a millisecond
    rounds = []
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        rounds.append(float(start.elapsed_time(end)) / 1e3 / reps)
    return max(cold, sorted(rounds)[1])


def select(
    cache_dir: Path,
    key: str,
    what: str,
    candidates: dict[str, Callable[[], Callable[[], object]]],
    timer: Timer,
    *,
    warm: Callable[[], None] | None = None,
) -> str:
    """The label of the fastest of ``candidates`` (``"aten"`` among them): each maps a label to
    a builder returning the callable to time. A template label wins only when faster than
    ``"aten"`` by more than noise (``_MARGIN``); a builder or call that raises counts as never
    finishing. The answer is
    memoised and kept in ``matmul_choices.json`` under ``key``; a known key times nothing
    (nor runs ``warm``, which compiles the candidates ahead of timing)."""
    memo = (cache_dir, key)
    if memo in _MEMO:
        choice_log(what, _label(_MEMO[memo]), "chosen earlier in this process")
        return _MEMO[memo]
    directory = ensure_private_dir(cache_dir)
    path = directory / _FILE
    known = read_choices(path, lambda _: True).get(key)
    if known is not None and (known == _ATEN or known in candidates):
        _MEMO[memo] = known
        choice_log(what, _label(known), "cached in %s", path)
        return known
    if warm is not None:
        warm()  # before anything is timed: compile what will be
    times: dict[str, float] = {}
    for label, build in candidates.items():
        try:
            fn = build()
            fn()  # compile and warm up outside the timing
            t = float(timer(label, fn))
        except Exception as exc:  # a tile the device cannot take: not a candidate
            log.debug("%s: %s failed: %s", what, label, exc)
            t = math.inf
        times[label] = t if not math.isnan(t) else math.inf
    base = times.get(_ATEN, math.inf)
    templates = {k: v for k, v in times.items() if k != _ATEN}
    best = min(templates, key=templates.__getitem__, default=None)
    # a template must beat aten by more than timing noise; aten untimed (its consumer kernel
    # failed to build) leaves nothing to beat: aten runs, as without max-autotune
    won = best is not None and not math.isinf(base) and templates[best] < _MARGIN * base
    chosen = best if won and best is not None else _ATEN
    tried = ", ".join(f"{k} {v * 1e6:.1f}" for k, v in sorted(times.items(), key=lambda kv: kv[1]))
    choice_log(what, _label(chosen), "timed, us: %s", tried)
    store_choice(directory, path, key, chosen)
    _MEMO[memo] = chosen
    return chosen


def _label(chosen: str) -> str:
    return "aten (cuBLAS)" if chosen == _ATEN else f"Triton template {chosen}"


def _module(source: str) -> ModuleType:
    mod = _MODULES.get(source)
    if mod is None:
        from .triton_runtime import load_triton_module

        mod = _MODULES[source] = load_triton_module(
            "import triton\nimport triton.language as tl\n\n" + source
        )
    return mod


def _random_buffers(
    graph: LoweredGraph, names: Sequence[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """Random data in each buffer's layout (constants as they are): what is timed."""
    gen = torch.Generator(device=device).manual_seed(0)
    out: dict[str, torch.Tensor] = {}
    for name in dict.fromkeys(names):
        if name in graph.constants:
            out[name] = graph.constants[name]
            continue
        spec = graph.buffers[name]
        sizes = [int(s) for s in spec.sizes]
        strides = [int(s) for s in spec.strides]
        t = torch.empty_strided(sizes, strides, dtype=spec.dtype, device=device)
        if spec.dtype.is_floating_point:
            t.normal_(generator=gen)
        else:
            t.zero_()
        out[name] = t
    return out


def _view(bufs: dict[str, torch.Tensor], ref: TensorRef) -> torch.Tensor:
    t = bufs[ref.buf]
    sizes = [int(s) for s in ref.sizes]
    strides = [int(s) for s in ref.strides]
    return t.as_strided(sizes, strides, t.storage_offset() + int(ref.offset))


def _candidates(
    graph: LoweredGraph, p: MatmulProblem, source: str, config: InductorConfig, interpret: bool
) -> dict[str, Callable[[], Callable[[], object]]]:
    """aten's matmul (+ the consumer's own kernel) and each tile config, as builders. The
    random data is made when the first is built (a choice already known builds none)."""
    held: dict[str, torch.Tensor] = {}

    def data() -> dict[str, torch.Tensor]:
        if not held:
            held.update(_random_buffers(graph, [r.buf for r in p.args()], graph.device))
        return held

    target = p.fallback.target

    def aten() -> Callable[[], object]:
        bufs = data()
        aten_args = [_view(bufs, a) for a in p.fallback.args if isinstance(a, TensorRef)]
        if p.epilogue_kernel is None:
            return lambda: target(*aten_args)
        from .triton_codegen import generate_triton
        from .triton_runtime import triton_kernels

        kernel = p.epilogue_kernel
        src, tsrcs = generate_triton([kernel], graph.buffers, interpret=interpret)
        launch, params = triton_kernels(src, tsrcs, {}, config.triton_compile_threads)[kernel.name]
        out = torch.empty_strided(
            [int(s) for s in p.out.sizes], [int(s) for s in p.out.strides],
            dtype=p.out.dtype, device=graph.device,
        )  # fmt: skip

        # the arguments laid out once: per call only the matmul's result changes (no Python
        # work of ours in aten's time that the wrapper would not do)
        given: dict[str, torch.Tensor] = {**bufs, p.out.name: out, p.mm_buf: out}
        args = [given[name] for name in params]
        at = params.index(p.mm_buf)

        def run() -> object:
            args[at] = target(*aten_args)
            launch(*args)
            return out

        return run

    cands: dict[str, Callable[[], Callable[[], object]]] = {_ATEN: aten}
    for cfg in _configs(p):

        def build(cfg: TileConfig = cfg) -> Callable[[], object]:
            tm = TemplateMatmul(getattr(_module(source), _NAME), p, cfg, source)
            views = [_view(data(), r) for r in p.args()]
            return lambda: tm(*views)

        cands[cfg.label] = build
    return cands


def _configs(p: MatmulProblem) -> list[TileConfig]:
    return configs_for(p.m, p.n, p.k, p.mm_dtype.itemsize)


def _precompile(
    graph: LoweredGraph, p: MatmulProblem, source: str, threads: int
) -> Callable[[], None]:
    """Compiles every config's kernel at once, in threads (each is a Triton compile of its
    own; one after the other they were most of the time a matmul's choice took)."""

    def run() -> None:
        try:
            from triton.runtime._async_compile import AsyncCompileMode

            from .triton_runtime import _CompilePool
        except ImportError:  # an older triton: each is compiled when first timed
            return
        # a compile depends on the arguments' dtypes and 16-byte alignment only: small
        # stand-ins (fresh allocations are aligned, as the real views are where it counts)
        args = [torch.empty(16, dtype=r.dtype, device=graph.device) for r in p.args()]
        if p.keep_mm:
            args.append(torch.empty(16, dtype=p.mm_dtype, device=graph.device))
        out = torch.empty(16, dtype=p.out.dtype, device=graph.device)
        fn = getattr(_module(source), _NAME)
        try:
            with AsyncCompileMode(_CompilePool.get(threads), ignore_errors=True):
                for c in _configs(p):
                    fn.warmup(
                        *args, out, grid=(1,), BLOCK_M=c.block_m, BLOCK_N=c.block_n,
                        BLOCK_K=c.block_k, GROUP_M=c.group_m, EVEN_K=p.k % c.block_k == 0,
                        num_warps=c.num_warps, num_stages=c.num_stages,
                    )  # fmt: skip
        except Exception as exc:  # pragma: no cover - each is compiled when first timed
            log.debug("parallel compile of %s failed: %s", p.describe, exc)

    return run


def _key(source: str, device: torch.device) -> str:
    import triton

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return repr((_KEY_VERSION, digest, name, triton.__version__, torch.__version__))


def autotune_matmuls(
    graph: LoweredGraph, items: list[ScheduleItem], config: InductorConfig, *, interpret: bool
) -> tuple[list[ScheduleItem], list[str]]:
    """``items`` with each matmul the measurement gave to the template replaced by a call of
    it (its fused consumer's kernel removed), and the templates' sources."""
    timer = TIMER
    if timer is None and graph.device.type == "cuda":
        timer = _cuda_timer
    out: list[ScheduleItem | None] = list(items)
    sources: list[str] = []
    for k, fused_at, found in find_matmuls(graph, items):
        node = items[k]
        assert isinstance(node, FallbackNode)
        if isinstance(found, str):
            choice_log(f"{node.target}", "aten", "no template: %s", found)
            continue
        p, consumer = found, fused_at
        if timer is None:
            choice_log(p.describe, "aten", "no GPU to measure on")
            continue
        try:
            picked = _choose(graph, p, consumer, config, interpret, timer)
        except Exception as exc:  # never wrong: aten's matmul runs as it would have
            choice_log(p.describe, "aten", "template failed: %s", exc)
            continue
        if picked is None:
            continue
        tm, p, consumer = picked
        outputs = (graph.buffers[p.mm_buf], p.out) if p.keep_mm else (p.out,)
        fused = FallbackNode(tm, p.args(), (), outputs, p.keep_mm)
        if consumer is None:
            out[k] = fused
        else:
            out[k] = None
            out[consumer] = fused
        sources.append(tm.source.replace(f"def {_NAME}(", f"def {tm.__name__.replace('/', '_')}("))
    return [item for item in out if item is not None], sources


def _choose(  # noqa: PLR0917
    graph: LoweredGraph,
    p: MatmulProblem,
    consumer: int | None,
    config: InductorConfig,
    interpret: bool,
    timer: Timer,
) -> tuple[TemplateMatmul, MatmulProblem, int | None] | None:
    """The template call for ``p`` (and whether its consumer is fused), None for aten."""
    try:
        source = template_source(p, _NAME)
    except LoweringError as exc:  # the consumer has no Triton form: the matmul alone
        log.debug("%s: consumer not fused: %s", p.describe, exc)
        p = _unfused(graph, p)
        consumer = None
        source = template_source(p, _NAME)
    cands = _candidates(graph, p, source, config, interpret)
    warm = None
    if graph.device.type == "cuda" and config.triton_compile_threads > 1:
        warm = _precompile(graph, p, source, config.triton_compile_threads)
    with torch.no_grad():
        key = _key(source, graph.device)
        chosen = select(config.cache_dir, key, p.describe, cands, timer, warm=warm)
    cfg = next((c for c in _configs(p) if c.label == chosen), None)
    if cfg is None:
        return None
    return TemplateMatmul(getattr(_module(source), _NAME), p, cfg, source), p, consumer


def _unfused(graph: LoweredGraph, p: MatmulProblem) -> MatmulProblem:
    spec = graph.buffers[p.mm_buf]
    return dataclasses.replace(
        p, out=spec, epilogue=None, epilogue_kernel=None, extra=(), keep_mm=False
    )
