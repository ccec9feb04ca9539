"""GLOBAL_STATE: torch's process/thread state a compiled graph silently depends on.

Captured when the guard is added, compared on every check.  What is captured and why:

* grad mode and inference mode -- decide whether autograd records the graph;
* the default dtype -- factory calls in the graph (``torch.ones(3)``) bake it in;
* deterministic algorithms (and warn-only) -- backends pick kernels by it;
* autocast: for each device type, enabled and its dtype, plus the autocast cache flag;
* how many torch-function modes and torch-dispatch modes are active -- a mode intercepts
  every op, and the graph was traced with or without it.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

__all__ = ["GlobalStateSnapshot", "capture_global_state", "AUTOCAST_DEVICES"]

#: Device types whose autocast state is captured.  Others are covered by the
#: ``_is_any_autocast_enabled`` fast check when nothing was enabled at capture.
AUTOCAST_DEVICES: tuple[str, ...] = ("cpu", "cuda")


@attrs.frozen
class GlobalStateSnapshot:
    """One reading of the global state; ``fields()`` lists it as (name, value) pairs."""

    grad_enabled: bool
    inference_mode: bool
    default_dtype: Any  # torch.dtype
    deterministic: bool
    deterministic_warn_only: bool
    any_autocast: bool
    autocast: tuple[tuple[str, bool, Any], ...]  # (device type, enabled, dtype)
    autocast_cache: bool
    torch_function_modes: int
    torch_dispatch_modes: int
    #: The dispatch TLS exclude set read at the same moment.  Autocast's enabled flag per
    #: device *is* a bit of this set (torch.set_autocast_enabled flips the device's Autocast
    #: key in it; is_autocast_enabled reads it back), so a check that already compares the
    #: exclude set with this value (DISPATCH_TLS) need not read ``any_autocast`` again.
    tls_exclude_raw: int = -1

    def fields(self) -> list[tuple[str, object]]:
        """The snapshot as ordered (name, value) pairs, for text and failure messages."""
        out: list[tuple[str, object]] = [
            ("grad_enabled", self.grad_enabled),
            ("inference_mode", self.inference_mode),
            ("default_dtype", self.default_dtype),
            ("deterministic_algorithms", self.deterministic),
            ("deterministic_warn_only", self.deterministic_warn_only),
            ("any_autocast", self.any_autocast),
        ]
        for device, enabled, dtype in self.autocast:
            out.append((f"autocast[{device}]", (enabled, dtype)))
        out.append(("autocast_cache", self.autocast_cache))
        out.append(("torch_function_modes", self.torch_function_modes))
        out.append(("torch_dispatch_modes", self.torch_dispatch_modes))
        return out


def _autocast_state(device: str) -> tuple[str, bool, Any]:
    return (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))


def capture_global_state() -> GlobalStateSnapshot:
    """Read the global state now (thread-local parts from the calling thread)."""
    return GlobalStateSnapshot(
        grad_enabled=torch.is_grad_enabled(),
        inference_mode=torch.is_inference_mode_enabled(),
        default_dtype=torch.get_default_dtype(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        any_autocast=torch._C._is_any_autocast_enabled(),
        autocast=tuple(_autocast_state(d) for d in AUTOCAST_DEVICES),
        autocast_cache=torch.is_autocast_cache_enabled(),
        torch_function_modes=torch._C._len_torch_function_stack(),
        torch_dispatch_modes=torch._C._len_torch_dispatch_stack(),
        tls_exclude_raw=torch._C._dispatch_tls_local_exclude_set().raw_repr(),
    )
