"""Where each buffer's computation came from: the aten nodes, and the user's source lines.

A buffer's origins are the aten node whose value it holds (or, for a buffer made inside a
lowering, the node being lowered) and every lazy value inlined into it, back to the values
that have memory of their own. Their ``meta["stack_trace"]`` (the user's call chain, kept by
the frontend and by aot/source_meta.py) gives ``File: model.py:14 in forward, code: ...`` lines,
as torch prints them: the wrapper carries them above each call, and the text shown of the
kernels (the output_code log, debug dumps) above each kernel. The compiled kernel text itself
stays without them, so that the on-disk C++ cache and the Triton tuning cache do not depend on
the user's line numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import torch
import torch.fx

from .ir import FallbackNode, Origin
from .tensorvalue import TensorValue

__all__ = [
    "annotate_kernels",
    "buffer_origins",
    "comment_lines",
    "item_buffers",
    "source_line",
]

_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<name>\S+)\s*$')


def source_line(stack_trace: str | None) -> str:
    """``File: model.py:14 in forward, code: return x + 1`` for the innermost frame of a
    traceback-style ``stack_trace`` ("" when there is none)."""
    if not stack_trace:
        return ""
    lines = stack_trace.rstrip("\n").splitlines()
    for k in range(len(lines) - 1, -1, -1):
        found = _FRAME.match(lines[k])
        if found is None:
            continue
        code = lines[k + 1].strip() if k + 1 < len(lines) else ""
        return f"File: {found['file']}:{found['line']} in {found['name']}, code: {code}"
    return ""


def _has_memory(value: object, realized: Mapping[int, object]) -> bool:
    """Whether an env value is not a lazy tensor (a buffer or view, a realized value, or no
    tensor at all): an inlining walk stops there."""
    return not isinstance(value, TensorValue) or value.ref is not None or id(value) in realized


def _buffer_of(value: object, realized: Mapping[int, tuple[TensorValue, TensorValue]]) -> str:
    if not isinstance(value, TensorValue):
        return ""
    if value.ref is not None:
        return value.ref.buf
    found = realized.get(id(value))
    return found[1].ref.buf if found is not None and found[1].ref is not None else ""


def buffer_origins(
    env: Mapping[torch.fx.Node, object],
    made_by: Mapping[str, torch.fx.Node | None],
    realized: Mapping[int, tuple[TensorValue, TensorValue]],
) -> dict[str, tuple[Origin, ...]]:
    """Each buffer's origins (see the module doc), in graph order. ``made_by``: the node being
    lowered when each buffer was made; ``realized``: lazy values given a buffer later (by the
    lowering of a consumer), by identity."""
    holder: dict[str, torch.fx.Node] = {}
    for node, value in env.items():
        buf = _buffer_of(value, realized)
        if buf and node.op == "call_function" and buf not in holder:
            holder[buf] = node
    order = {node: k for k, node in enumerate(env)}
    out: dict[str, tuple[Origin, ...]] = {}
    for buf, maker in made_by.items():
        first = holder.get(buf, maker)
        if first is None:
            continue
        seen = {first}
        work = [first]
        while work:
            for arg in work.pop().all_input_nodes:
                if arg not in seen and arg in env and not _has_memory(env[arg], realized):
                    seen.add(arg)
                    work.append(arg)
        out[buf] = tuple(
            Origin(n.name, str(n.target), source_line(n.meta.get("stack_trace")))
            for n in sorted(seen, key=lambda n: order.get(n, -1))
        )
    return out


def item_buffers(item: object) -> list[str]:
    """The buffers a schedule item (a fused kernel or an aten call) writes."""
    if isinstance(item, FallbackNode):
        return [s.name for s in item.outputs if s is not None]
    steps = getattr(item, "steps", ())
    return [step.node.buf for step in steps]


def comment_lines(
    origins: Mapping[str, Sequence[Origin]], buffers: Iterable[str], prefix: str
) -> list[str]:
    """The comment block for code writing ``buffers``: the aten nodes, then each distinct
    source line, each line starting with ``prefix``."""
    nodes: list[Origin] = []
    for buf in buffers:
        for origin in origins.get(buf, ()):
            if origin not in nodes:
                nodes.append(origin)
    if not nodes:
        return []
    names = ", ".join(o.name for o in nodes)
    targets = ", ".join(dict.fromkeys(o.target for o in nodes))
    lines = [f"{prefix}Source nodes: [{names}], Original ATen: [{targets}]"]
    lines += [f"{prefix}{line}" for line in dict.fromkeys(o.source for o in nodes) if line]
    return lines


def annotate_kernels(
    source: str, kernels: Sequence[object], origins: Mapping[str, Sequence[Origin]],
    *, triton: bool,
) -> str:
    """``source`` (a C++ translation unit or a Triton module) with each kernel's comment block
    above its definition (``extern "C" void name(`` / ``@triton.jit`` before ``def name(``,
    or a copy's ``name = first``)."""
    prefix = "# " if triton else "// "
    blocks = {
        getattr(k, "name", ""): comment_lines(origins, item_buffers(k), prefix) for k in kernels
    }
    lines = source.split("\n")
    out: list[str] = []
    for k, line in enumerate(lines):
        name = _defined_name(line, triton)
        if blocks.get(name):
            at = len(out) - 1 if triton and k and lines[k - 1].startswith("@triton") else len(out)
            out[at:at] = blocks.pop(name)
        out.append(line)
    return "\n".join(out)


_CPP_DEF = re.compile(r'^extern "C" void (\w+)\(')
_PY_DEF = re.compile(r"^(?:def (\w+)\(|(\w+) = \w+$)")


def _defined_name(line: str, triton: bool) -> str:
    found = (_PY_DEF if triton else _CPP_DEF).match(line)
    if found is None:
        return ""
    return next((g for g in found.groups() if g), "")
