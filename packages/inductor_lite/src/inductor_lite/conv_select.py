"""A convolution's layout chosen by measurement where the cost model cannot tell.

``convolutions`` hands oneDNN a channels-last input and weight (the weight copied on every
call), or keeps eager's NCHW layout where the weight outweighs the output. Between the clear
cases -- a weight needing a copy with between a quarter and four times the output's elements --
neither wins by a margin an element count can call, so the two are timed once, at compile time,
on random data of the convolution's shapes: the channels-last call plus the weight's copy
against the NCHW call, best of ``_REPS`` each (a few milliseconds per shape). The answer is
kept in ``conv_layouts.json`` in the kernel cache directory (keyed by shapes, arguments and
thread count), so a shape is timed once per machine; every choice is logged on
``strata.inductor_lite`` at debug level.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .cache import _atomic_write, _trusted, ensure_private_dir
from .choices import choice as choice_log

__all__ = ["measured_layout"]

log = logging.getLogger("strata.inductor_lite")

_REPS = 3
_FILE = "conv_layouts.json"
_MEMO: dict[tuple[Path, str], str] = {}


def _best(fn: Callable[[], object]) -> float:
    fn()  # oneDNN builds its primitive on the first call
    best = float("inf")
    for _ in range(_REPS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _read(path: Path) -> dict[str, str]:
    if not _trusted(path):
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in data.items() if v in ("nhwc", "nchw")} if isinstance(data, dict) else {}
    )


def measured_layout(  # noqa: PLR0917
    cache_dir: Path,
    x_sizes: Sequence[int],
    w_sizes: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> str:
    """``"nhwc"`` or ``"nchw"``: the faster layout for this float32 convolution, per call."""
    key = repr(
        (
            tuple(x_sizes),
            tuple(w_sizes),
            tuple(stride),
            tuple(padding),
            tuple(dilation),
            groups,
            torch.get_num_threads(),
        )
    )
    memo = (cache_dir, key)
    if memo in _MEMO:
        return _MEMO[memo]
    directory = ensure_private_dir(cache_dir)
    path = directory / _FILE
    known = _read(path)
    if key in known:
        _MEMO[memo] = known[key]
        return known[key]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*x_sizes, generator=gen)
    w = torch.randn(*w_sizes, generator=gen)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    args = (list(stride), list(padding), list(dilation), False, [0, 0], groups)

    def nhwc() -> object:
        w_cl = w.contiguous(memory_format=torch.channels_last)  # the per-call weight copy
        return torch.ops.aten.convolution.default(x_cl, w_cl, None, *args)

    def nchw() -> object:
        return torch.ops.aten.convolution.default(x, w, None, *args)

    with torch.no_grad():
        t_nhwc, t_nchw = _best(nhwc), _best(nchw)
    choice = "nhwc" if t_nhwc <= t_nchw else "nchw"
    choice_log(
        f"convolution x{tuple(x_sizes)} w{tuple(w_sizes)}",
        "channels-last" if choice == "nhwc" else "NCHW",
        "timed: channels-last %.0f us, NCHW %.0f us",
        t_nhwc * 1e6,
        t_nchw * 1e6,
    )
    log.debug(
        "convolution x%s w%s: channels-last %.0f us, NCHW %.0f us -> %s (measured)",
        tuple(x_sizes),
        tuple(w_sizes),
        t_nhwc * 1e6,
        t_nchw * 1e6,
        choice,
    )
    known = _read(path)  # another process may have added entries meanwhile
    known[key] = choice
    try:
        _atomic_write(directory, path, json.dumps(known, indent=0).encode())
    except OSError as exc:
        log.debug("conv layout cache not written: %s", exc)
    _MEMO[memo] = choice
    return choice
