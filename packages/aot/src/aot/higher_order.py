"""Running torch's higher-order ops (``torch.ops.higher_order.cond``) inside aot's traces.

aot functionalizes with the C++ Functionalize key switched on for the thread (trace.py). torch's
cond autograd snapshots the thread's dispatch keys in its forward and forces them back on while
it traces the branches' backward on plain (unwrapped) tensors. With Functionalize among them, a
cond inside a branch then wraps its outputs as functional tensors whose inner values carry no
grad, and the branch's backward finds nothing to differentiate (a nested cond failed with
"outs_to_grad length (0) != tangents length (1)"). So a higher-order op runs with the key off
for the thread: its functional inputs still carry the key themselves (the op is functionalized
as before), and the snapshot is the one torch's own functionalization leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._guards import detect_fake_mode, tracing
from torch.fx.experimental.proxy_tensor import get_proxy_mode

__all__ = [
    "COND_OPS",
    "forget_unbound_unbacked",
    "functionalization_outside_tls",
    "outside_capture_context",
]

# The ops run that way. Only cond: a checkpointed region's body (tag_activation_checkpoint)
# runs its ops directly, and a factory call in it must still make a functional tensor.
COND_OPS: frozenset[object] = frozenset({torch.ops.higher_order.cond})

_FUNCTIONALIZE = torch._C.DispatchKey.Functionalize


@contextlib.contextmanager
def functionalization_outside_tls() -> Iterator[None]:
    """Switch the thread's Functionalize key off for the block (back on, as it was, after)."""
    if not torch._C._dispatch_tls_is_dispatch_key_included(_FUNCTIONALIZE):
        yield
        return
    reapply_views = torch._C._functionalization_reapply_views_tls()
    torch._disable_functionalization()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        torch._enable_functionalization(reapply_views=reapply_views)


def forget_unbound_unbacked() -> None:
    """Outside a make_fx trace (aot's analysis run), forget unbacked symbols nothing bound.

    A cond whose operands need grad builds its branches' graphs with make_fx on the spot (its
    schema check), and that trace fails on any unbacked symbol still pending: one from an
    ``item()`` earlier in the analysis run (``torch.cond(t.item(), ...)``), which records no
    graph and so never binds it. Inside aot's own trace the op that made a symbol binds it at
    once, so nothing is pending there and nothing is dropped.
    """
    if get_proxy_mode() is not None:
        return
    shape_env = getattr(detect_fake_mode(), "shape_env", None)
    pending = getattr(shape_env, "pending_fresh_unbacked_symbols", None)
    if pending:
        pending.clear()


@contextlib.contextmanager
def outside_capture_context() -> Iterator[None]:
    """aot's compile, hidden from the tracing context of a capture layer that called it.

    Under torch.compile the backend runs inside torch's tracing context, and torch 2.11's
    ``materialize_as_graph`` (a cond's branches, traced for its schema check in training)
    takes that context's fake mode over the one aot's fake inputs live in: the branch then
    mixed two fake modes and failed ("Mixing fake modes NYI"). aot picks its own mode (the
    inputs' own, else a fresh one), so every fake-mode lookup inside must find that one: with
    no context installed, torch looks at the active mode and the inputs, as on torch 2.13.
    """
    with tracing(None):
        yield
