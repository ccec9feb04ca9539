"""Text for people: graphs with shapes and source lines, guards with readable names and lines.

Shared by the log channels, the structured trace (tlparse) and the debug dumps.
"""

from __future__ import annotations

import dis
import io
import os
import re
import sysconfig
import types
from typing import Any

import torch

from .state import FrameRecord, state

__all__ = [
    "break_text",
    "bytecode_text",
    "graph_text",
    "guards_text",
    "readable_names",
    "source_locations",
    "user_frame",
]


def graph_text(gm: torch.fx.GraphModule) -> str:
    """The graph as Python with ``f32[4, 16][16, 1]cpu`` per value and ``# File:`` lines.

    The shapes come from each node's example value, the ``# File: model.py:14 in forward,
    code: ...`` comments from the call chain symbolic_vm records on each node.
    """
    try:
        text = gm.print_readable(print_output=False, include_stride=True, include_device=True)
    except Exception:  # a graph print_readable cannot render: its plain code
        return str(gm.code)
    return str(text)


def _library_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["purelib"], paths["platlib"], os.path.dirname(torch.__file__)}
    here = os.path.dirname(os.path.dirname(__file__))  # compile_api's src (or site-packages)
    dirs.add(here)
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


_LIBRARY = _library_prefixes()
_FRAME_RE = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')


def _frames(stack_trace: str) -> list[tuple[str, int, str, str]]:
    """(filename, line, function, code) of each frame of a traceback-style text, outermost
    first."""
    lines = stack_trace.splitlines()
    out = []
    for i, line in enumerate(lines):
        match = _FRAME_RE.match(line)
        if match:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append((match.group(1), int(match.group(2)), match.group(3), code))
    return out


def user_frame(stack_trace: str) -> tuple[str, int, str, str] | None:
    """The innermost frame of ``stack_trace`` in the user's code (else the innermost one)."""
    frames = _frames(stack_trace)
    for frame in reversed(frames):
        if not frame[0].startswith(_LIBRARY) and not frame[0].startswith("<"):
            return frame
    return frames[-1] if frames else None


def _short(filename: str) -> str:
    parts = filename.split(os.sep)
    return os.sep.join(parts[-2:]) if len(parts) > 2 else filename


def source_locations(graphs: list[Any]) -> dict[str, str]:
    """Each graph input's source name (``L['x']``) -> where the user's code first used it.

    Written as torch writes a guard's origin: ``x = a / (torch.abs(a) + 1)  # model.py:14 in
    forward``. From the first node that reads the input (its recorded call chain).
    """
    out: dict[str, str] = {}
    for graph in graphs:
        gm = getattr(graph, "gm", graph)
        for node in gm.graph.nodes:
            if node.op != "placeholder":
                continue
            source = node.meta.get("source")
            name = source.name() if hasattr(source, "name") else None
            if not name or name in out:
                continue
            for user in node.users:
                trace = user.meta.get("stack_trace")
                frame = user_frame(trace) if trace else None
                if frame is not None:
                    filename, line, function, code = frame
                    out[name] = f"{code}  # {_short(filename)}:{line} in {function}"
                    break
    return out


def code_locations(code: types.CodeType) -> dict[str, str]:
    """``L['n']`` / ``G['torch']`` -> the first line of ``code`` that reads that name.

    For guards on values that left no graph input (an int baked into the graph, a module
    global): where the user's function reads them, in the same form as source_locations.
    """
    import linecache

    out: dict[str, str] = {}
    instructions = list(dis.get_instructions(code))
    # A resume function holds the whole original body and jumps to where it resumes: what
    # comes before that target never runs.
    start = next(
        (i.argval for i in instructions[:4] if i.opname.startswith("JUMP")), 0
    )
    for inst in instructions:
        if not isinstance(start, int) or inst.offset < start:
            continue
        line = inst.positions.lineno if inst.positions else None
        if line is None or not isinstance(inst.argval, str):
            continue
        if inst.opname in {"LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST_CHECK"}:
            name = f"L[{inst.argval!r}]"
        elif inst.opname in {"LOAD_GLOBAL", "LOAD_NAME"}:
            name = f"G[{inst.argval!r}]"
        else:
            continue
        if name not in out:
            text = linecache.getline(code.co_filename, line).strip()
            out[name] = f"{text}  # {_short(code.co_filename)}:{line} in {code.co_name}"
    return out


def record_locations(record: FrameRecord) -> dict[str, str]:
    """Where each guarded source was first used: graph inputs first, then the frame's reads."""
    out = source_locations(record.graphs)
    for name, where in code_locations(record.code).items():
        out.setdefault(name, where)
    return out


_INSTALLED_RE = re.compile(r"G\['(__strata_\w+)'\](?:\['(\w+)'\])?")


def _installed_value(name: str) -> object:
    with state.lock:
        for namespace, installed in reversed(state.installed):
            if installed == name and name in namespace:
                return namespace[name]
    return None


def readable_names(text: str) -> str:
    """``G['__strata_0_globals_1']['F']`` -> ``torch.nn.modules.linear.F``: Strata's installed
    globals (another module's globals dict, a module object) named as the user knows them."""

    def replace(match: re.Match[str]) -> str:
        value = _installed_value(match.group(1))
        key = match.group(2)
        if isinstance(value, types.ModuleType):
            named = value.__name__
            return f"{named}[{key!r}]" if key else named
        if isinstance(value, dict) and isinstance(value.get("__name__"), str):
            return f"{value['__name__']}.{key}" if key else f"vars({value['__name__']})"
        return match.group(0)

    return _INSTALLED_RE.sub(replace, text)


_ID_RE = re.compile(r" id=\d+(?= )")
_KIND_RE = re.compile(r"^(\s*)([A-Z_]+): (\S+)")
_TOKEN_RE = re.compile(r"_strata_token', 0\) in \((\d+), 0\)\s+# compiled by (compile\(.*?\));")


def _location_of(expr: str, locations: dict[str, str]) -> str | None:
    """Where the user's code first reads ``expr`` (or a value read through it)."""
    for name, where in locations.items():
        if name.startswith(expr) or expr.startswith(name):
            return where
    return None


def guards_text(record: FrameRecord, guards_lines: str | None = None) -> str:
    """The guards of one compiled frame: one line each, readable names, the user's line."""
    text = record.guards_text if guards_lines is None else guards_lines
    locations = record_locations(record)
    out = []
    for raw in text.splitlines():
        token = _TOKEN_RE.search(raw)
        if token is not None:
            out.append(
                f"COMPILE_CONTEXT: the running call is {token.group(2)} (or a run() block)"
            )
            continue
        # The object's id says nothing to a reader (its name and type follow it).
        line = _ID_RE.sub("", readable_names(raw))
        match = _KIND_RE.match(line)
        if match is not None:
            where = _location_of(match.group(3), locations)
            if where is not None and "  # " not in line:
                line = f"{line}  # {where}"
        out.append(line)
    return "\n".join(out)


def bytecode_text(record: FrameRecord) -> str:
    """The original and modified bytecode of a compiled frame, as ``dis`` prints them."""
    out = io.StringIO()
    out.write(f"ORIGINAL BYTECODE of {record.where}:\n")
    dis.dis(record.code, file=out)
    if record.transformed is not None:
        out.write(f"\nMODIFIED BYTECODE ({record.transformed.co_name}):\n")
        dis.dis(record.transformed, file=out)
    return out.getvalue()


def break_text(brk: Any) -> str:
    """A graph break as a traceback: the user's calls that led to it, outermost first, then
    the construct itself (which may be in library code)."""
    import linecache

    frames = [*reversed(getattr(brk, "callers", ()) or ()), (brk.filename, brk.lineno)]
    lines = [str(brk.reason)]
    for filename, lineno in frames:
        lines.append(f'  File "{filename}", line {lineno}')
        source = (
            brk.source_line
            if (filename, lineno) == (brk.filename, brk.lineno)
            else linecache.getline(filename, lineno)
        )
        if source and source.strip():
            lines.append(f"    {source.strip()}")
    return "\n".join(lines)
