"""Guards on thread and process state, one per guard set: DISPATCH_TLS (the dispatch
include/exclude sets) and GLOBAL_STATE (grad and inference mode, default dtype, deterministic
algorithms, autocast, active modes; see global_state)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch

from guards.global_state import AUTOCAST_DEVICES, GlobalStateSnapshot, capture_global_state
from guards.guard import CodeContext, Guard
from guards.native import dispatch_tls_check, global_state_check


@attrs.frozen
class DispatchTls(Guard):
    """The thread-local dispatch include/exclude sets at capture (one per guard set).

    Together with each tensor's own dispatch keys this pins the keys a kernel call would
    dispatch on.  It is stricter than comparing ``(keys | include) - exclude`` per tensor:
    a TLS change that would not alter any tensor's effective keys still fails (a recompile,
    never a wrong result), in exchange for two calls per check instead of two per tensor.
    """

    kind: ClassVar[str] = "DISPATCH_TLS"
    rank: ClassVar[int] = 6
    include_raw: int
    exclude_raw: int
    include: Any = attrs.field(eq=False)
    exclude: Any = attrs.field(eq=False)

    @classmethod
    def capture(cls) -> DispatchTls:
        """Read the calling thread's dispatch TLS now."""
        inc = torch._C._dispatch_tls_local_include_set()
        exc = torch._C._dispatch_tls_local_exclude_set()
        return cls(None, inc.raw_repr(), exc.raw_repr(), inc, exc)

    def text(self) -> str:
        return f"DISPATCH_TLS: include={self.include} exclude={self.exclude}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            check = dispatch_tls_check(ctx.native, self.include_raw, self.exclude_raw)
            return [f"if not {ctx.bind(check, 'tls_check')}(): return False"]
        inc = ctx.bind(torch._C._dispatch_tls_local_include_set, "tls_include")
        exc = ctx.bind(torch._C._dispatch_tls_local_exclude_set, "tls_exclude")
        return [
            f"if {inc}().raw_repr() != {self.include_raw}: return False",
            f"if {exc}().raw_repr() != {self.exclude_raw}: return False",
        ]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        inc = torch._C._dispatch_tls_local_include_set()
        exc = torch._C._dispatch_tls_local_exclude_set()
        problems = []
        if inc.raw_repr() != self.include_raw:
            problems.append(f"dispatch TLS include set: expected {self.include}, actual {inc}")
        if exc.raw_repr() != self.exclude_raw:
            problems.append(f"dispatch TLS exclude set: expected {self.exclude}, actual {exc}")
        return "; ".join(problems) or None


@attrs.frozen
class GlobalState(Guard):
    """Grad mode, inference mode, default dtype, deterministic algorithms, autocast and the
    number of active torch-function / torch-dispatch modes, as captured when the guard was
    added (see ``global_state``)."""

    kind: ClassVar[str] = "GLOBAL_STATE"
    rank: ClassVar[int] = 7
    snapshot: GlobalStateSnapshot

    def text(self) -> str:
        parts = " ".join(f"{name}={value}" for name, value in self.snapshot.fields())
        return f"GLOBAL_STATE: {parts}"

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if ctx.native is not None:
            # Grad and inference mode, default dtype, deterministic flags and the two mode
            # stack lengths in one C++ call; the autocast reads stay in Python.
            check = ctx.bind(global_state_check(ctx.native, s), "global_state_check")
            return [
                f"if not {check}(): return False",
                *self._emit_any_autocast(ctx),
                *self._emit_autocast_state(ctx),
            ]
        return [
            f"if {ctx.bind(torch.is_grad_enabled, 'is_grad_enabled')}() is not {s.grad_enabled!r}:"
            " return False",
            *self._emit_any_autocast(ctx),
            f"if {ctx.bind(torch.get_default_dtype, 'get_default_dtype')}() is not "
            f"{ctx.bind(s.default_dtype, 'dtype')}: return False",
            # The C reads behind torch.are_deterministic_algorithms_enabled and
            # torch.is_deterministic_algorithms_warn_only_enabled (those are Python wrappers
            # that only return these): the same flag, without a Python frame per check.
            f"if {ctx.bind(torch._C._get_deterministic_algorithms, 'deterministic')}() is not "
            f"{s.deterministic!r}: return False",
            f"if {ctx.bind(torch.is_inference_mode_enabled, 'inference_mode')}() is not "
            f"{s.inference_mode!r}: return False",
            f"if {ctx.bind(torch._C._len_torch_function_stack, 'function_modes')}() != "
            f"{s.torch_function_modes}: return False",
            f"if {ctx.bind(torch._C._len_torch_dispatch_stack, 'dispatch_modes')}() != "
            f"{s.torch_dispatch_modes}: return False",
            *self._emit_warn_only(ctx),
            *self._emit_autocast_state(ctx),
        ]

    def _emit_any_autocast(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if ctx.tls_exclude_checked == s.tls_exclude_raw:
            # Skipped when DISPATCH_TLS compares the exclude set read with this snapshot: the
            # autocast-enabled flags are bits of that set (see GlobalStateSnapshot), so equal
            # sets mean equal flags (saves one ~80 ns call).
            return []
        return [
            f"if {ctx.bind(torch._C._is_any_autocast_enabled, 'any_autocast')}() is not "
            f"{s.any_autocast!r}: return False"
        ]

    def _emit_warn_only(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if not s.deterministic:
            return []
        warn = ctx.bind(torch._C._get_deterministic_algorithms_warn_only, "det_warn_only")
        return [f"if {warn}() is not {s.deterministic_warn_only!r}: return False"]

    def _emit_autocast_state(self, ctx: CodeContext) -> list[str]:
        s = self.snapshot
        if not s.any_autocast:
            # Only when autocast was on at capture: otherwise "none enabled" suffices and the
            # dtypes / cache flag cannot change what runs.
            return []
        state = ctx.bind(_autocast_now, "autocast_state")
        expected = ctx.bind((s.autocast, s.autocast_cache), "autocast")
        return [f"if {state}() != {expected}: return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        now = capture_global_state()
        relevant = {
            "grad_enabled",
            "inference_mode",
            "default_dtype",
            "deterministic_algorithms",
            "any_autocast",
            "torch_function_modes",
            "torch_dispatch_modes",
        }
        if self.snapshot.deterministic:
            relevant.add("deterministic_warn_only")
        if self.snapshot.any_autocast:
            relevant.update(n for n, _ in self.snapshot.fields() if n.startswith("autocast"))
        problems = [
            f"global state {name}: expected {want}, actual {got}"
            for (name, want), (_, got) in zip(self.snapshot.fields(), now.fields(), strict=True)
            if name in relevant and want != got
        ]
        return "; ".join(problems) or None


def _autocast_now() -> tuple[tuple[tuple[str, bool, Any], ...], bool]:
    return (
        tuple(
            (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES
        ),
        torch.is_autocast_cache_enabled(),
    )

