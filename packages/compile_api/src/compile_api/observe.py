"""What a compile shows to the user: the log channels, the structured trace, the debug dumps.

``frame_compiler`` calls :func:`begin` when it starts compiling a frame and :func:`finish` when
the frame's outcome is known; everything a backend produces meanwhile (aot's forward and
backward graphs, inductor_lite's generated code, its perf hints) arrives as records on the
``strata.aot_graphs``, ``strata.output_code`` and ``strata.perf_hints`` loggers, which those
packages write to without knowing who listens, and is kept on the frame's record.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import types
import weakref
from typing import Any

import evalframe

from . import logs
from .config import config
from .dumps import DebugDumps
from .readable import break_text, bytecode_text, graph_text, guards_text, record_locations
from .state import FrameRecord
from .trace import TraceWriter

__all__ = ["begin", "entry_compiled", "finish", "recompile_reasons", "reset"]

# Loggers the backends write artifacts to, and the kind each record stands for.
_ARTIFACT_LOGGERS = ("strata.aot_graphs", "strata.output_code", "strata.perf_hints")

_WRAPPERS = frozenset(
    os.path.join(os.path.dirname(__file__), name)
    for name in ("api.py", "explain.py", "frame_compiler.py", "observe.py")
)
_current: list[FrameRecord] = []
_frame_ids: dict[types.CodeType, int] = {}
_compiles: dict[types.CodeType, int] = {}
# The record of each compiled entry's guard function (labels recompile reasons per entry).
_entries: weakref.WeakKeyDictionary[Any, FrameRecord] = weakref.WeakKeyDictionary()
_writer: list[TraceWriter] = []
# Microseconds one guard check took, per record (shown in the guards log), until finish().
_latency: dict[int, float] = {}
_dumps: list[DebugDumps] = []


class _Collect(logging.Handler):
    """Keeps each artifact record on the frame being compiled."""

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, "strata_artifact", None) or record.name.removeprefix("strata.")
        if _current:
            text = record.getMessage()
            if text.startswith(f"{kind}:\n"):
                text = text[len(kind) + 2 :]
            _current[-1].artifacts.append((kind, text))


_collector = _Collect(logging.DEBUG)


def _trace_dir() -> str:
    return config.trace_dir or os.environ.get("TORCH_TRACE", "")


def _debug_dir() -> str | None:
    if not (config.compile_debug or os.environ.get("TORCH_COMPILE_DEBUG", "") in {"1", "true"}):
        return None
    return os.environ.get("STRATA_COMPILE_DEBUG_DIR") or os.environ.get(
        "TORCH_COMPILE_DEBUG_DIR", os.getcwd()
    )


def _trace() -> TraceWriter | None:
    directory = _trace_dir()
    if not directory:
        return None
    if not _writer or os.path.dirname(_writer[0].path) != os.path.abspath(directory):
        if _writer:
            _writer.pop().close()
        _writer.append(TraceWriter(os.path.abspath(directory)))
    return _writer[0]


def _dumper() -> DebugDumps | None:
    directory = _debug_dir()
    if directory is None:
        return None
    if not _dumps or _dumps[0].parent != directory:
        _dumps[:] = [DebugDumps(directory)]
    return _dumps[0]


def _wants_artifacts() -> bool:
    return bool(_trace_dir()) or _debug_dir() is not None


_collecting: list[bool] = [False]


def _collect(on: bool) -> None:
    """Keep artifact records at DEBUG while a trace or dump wants them (no printing).

    When that stops, each logger this raised goes back to NOTSET unless its channel is on.
    """
    if on == _collecting[0]:
        return
    _collecting[0] = on
    for name in _ARTIFACT_LOGGERS:
        logger = logging.getLogger(name)
        if on:
            logger.addHandler(_collector)
            if logger.getEffectiveLevel() > logging.DEBUG:
                logger.setLevel(logging.DEBUG)
        else:
            logger.removeHandler(_collector)
            if not logs.wanted(name.removeprefix("strata.")):
                logger.setLevel(logging.NOTSET)


def _user_stack(frame: types.FrameType) -> list[tuple[str, int, str, str]]:
    """The call chain that reached ``frame`` (outermost first), without evalframe's layer."""
    import linecache

    frames = []
    current: types.FrameType | None = frame
    while current is not None:
        code = current.f_code
        if code.co_filename in _WRAPPERS:  # compile_api's own call layers: not the user's
            current = current.f_back
            continue
        line = current.f_lineno if current is not frame else code.co_firstlineno
        source = linecache.getline(code.co_filename, line).strip()
        frames.append((code.co_filename, line or 0, code.co_name, source))
        current = current.f_back
    return list(reversed(frames))


def begin(record: FrameRecord, frame: types.FrameType) -> None:
    """A compile of ``frame`` starts: number it, and collect what its backends produce."""
    logs.refresh_from_torch()
    code = record.code
    frame_id = _frame_ids.setdefault(code, len(_frame_ids))
    index = _compiles.get(code, 0)
    _compiles[code] = index + 1
    record.compile_id = f"{frame_id}/{index}"
    record.start_time = time.time()
    _current[:] = [record]
    wants = _wants_artifacts()
    _collect(wants)
    writer = _trace()
    if writer is not None:
        if record.recompile_reasons:
            import json

            writer.emit(
                "artifact",
                {"name": "recompile_reasons", "encoding": "json"},
                json.dumps(record.recompile_reasons, indent=1),
                record.compile_id,
            )
        stack = [
            {"line": line, "name": name, "filename": writer.intern(filename), "loc": source}
            for filename, line, name, source in _user_stack(frame)
        ]
        writer.emit("dynamo_start", {"stack": stack}, None, record.compile_id)


def reset() -> None:
    """Number frames and compiles from 0 again (``compile_api.reset()``)."""
    _frame_ids.clear()
    _compiles.clear()
    _current.clear()


def entry_compiled(
    guard_fn: Any, record: FrameRecord, f_locals: dict[str, Any] | None = None
) -> None:
    """Remember which compile made the cache entry whose guard is ``guard_fn``; when the
    guards are shown, time its check on the frame's own locals (as torch's guards log does)."""
    # Not weak-referenceable: its failures go unlabelled.
    with contextlib.suppress(TypeError):
        _entries[guard_fn] = record
    if f_locals is not None and (logs.enabled("guards") or _wants_artifacts()):
        runs = 20
        with contextlib.suppress(Exception):
            guard_fn(f_locals)  # the first call may build lazily what later calls reuse
        start = time.perf_counter()
        with contextlib.suppress(Exception):
            for _ in range(runs):
                guard_fn(f_locals)
        _latency[id(record)] = (time.perf_counter() - start) / runs * 1e6



def recompile_reasons(code: types.CodeType, f_locals: dict[str, Any]) -> list[str]:
    """Why each cache entry of ``code`` rejects these locals, labelled with the entry's compile
    id (``0/1: ...``) and, where known, the user's line that made the guard."""
    reasons: list[str] = []
    for entry in evalframe.cache_entries(code):
        failures = getattr(entry.guard, "failures", None)
        if failures is None:
            continue
        try:
            failed = list(failures(f_locals))
        except Exception as err:  # a failing explanation must not stop a recompile
            failed = [f"(could not explain guard failure: {err})"]
        record = _entries.get(entry.guard)
        label = f"{record.compile_id}: " if record is not None else ""
        locations = record_locations(record) if record is not None else {}
        for reason in failed:
            # The longest source named in the reason (L['x'].size() before L['x']).
            # (guards name a tensor local as tensor 'x' in a size/stride mismatch)
            named = [
                name
                for name in locations
                if name in reason or f"tensor {name[2:-1]}" in reason
            ]
            where = locations[max(named, key=len)] if named else None
            reasons.append(f"{label}{reason}" + (f"  # {where}" if where else ""))
    return reasons


def _log(record: FrameRecord) -> None:
    for brk in record.breaks:
        logs.channel("graph_breaks").debug(
            "Graph break in %s: %s", record.code.co_name, break_text(brk)
        )
    if logs.enabled("graph_code"):
        for graph in record.graphs:
            logs.channel("graph_code").debug(
                "TRACED GRAPH %s of %s (compile %s):\n%s",
                graph.name,
                record.where,
                record.compile_id,
                graph_text(graph.gm),
            )
    if logs.enabled("bytecode") and record.transformed is not None:
        logs.channel("bytecode").debug("%s", bytecode_text(record))
    if logs.enabled("guards") and record.guards_text:
        latency = _latency.get(id(record))
        logs.channel("guards").debug(
            "GUARDS of %s (compile %s):\n%s%s",
            record.where,
            record.compile_id,
            guards_text(record),
            "" if latency is None else f"\nGuard eval latency = {latency:.2f} us",
        )
    if record.ran_eagerly and logs.enabled("perf_hints"):
        logs.channel("perf_hints").debug(
            "%s runs eagerly (not compiled): %s", record.where, record.ran_eagerly
        )
    elif record.breaks and logs.enabled("perf_hints"):
        logs.channel("perf_hints").debug(
            "%s has %d graph break(s); each break ends a graph and runs Python between graphs",
            record.where,
            len(record.breaks),
        )
    if config.debug:
        graphs = "".join(
            f"\n__compiled_fn_ graph {graph.name} of {record.where}:\n{graph.gm.code}"
            for graph in record.graphs
        )
        print(f"{graphs}\n{bytecode_text(record)}\nGUARDS:\n{guards_text(record)}\n")


def _sizes(gm: Any) -> dict[str, list[Any]]:
    out = {}
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        shape = getattr(value, "shape", None)
        if shape is not None:
            out[node.name] = [s if isinstance(s, int) else str(s) for s in shape]
    return out


_ARTIFACT_KINDS = {
    "aot_forward_graph": "aot_forward_graph",
    "aot_backward_graph": "aot_backward_graph",
    "aot_joint_graph": "aot_joint_graph",
    "aot_inference_graph": "aot_inference_graph",
}


def _trace_record(writer: TraceWriter, record: FrameRecord) -> None:
    cid = record.compile_id
    for brk in record.breaks:
        writer.emit(
            "artifact",
            {"name": "dynamo_graph_break_reason", "encoding": "string"},
            f"Graph break in {record.code.co_name}: {break_text(brk)}",
            cid,
        )
    for graph in record.graphs:
        writer.emit("dynamo_output_graph", {"sizes": _sizes(graph.gm)}, graph_text(graph.gm), cid)
    for kind, text in record.artifacts:
        if kind in _ARTIFACT_KINDS:
            writer.emit(_ARTIFACT_KINDS[kind], {}, text, cid)
        elif kind == "output_code":
            writer.emit("inductor_output_code", {"filename": None}, text, cid)
        else:
            writer.emit("artifact", {"name": kind, "encoding": "string"}, text, cid)
    if record.transformed is not None:
        writer.emit(
            "artifact",
            {"name": f"{record.code.co_name}_BYTECODE", "encoding": "string"},
            bytecode_text(record),
            cid,
        )
    if record.guards_text:
        writer.emit("dynamo_cpp_guards_str", {}, guards_text(record), cid)
    op_count = sum(
        1
        for g in record.graphs
        for n in g.gm.graph.nodes
        if n.op in {"call_function", "call_method", "call_module"}
    )
    code = record.code
    writer.emit(
        "compilation_metrics",
        {
            "compile_id": cid,
            "co_name": code.co_name,
            "co_filename": code.co_filename,
            "co_firstlineno": code.co_firstlineno,
            "cache_size": int(cid.split("/")[1]),
            "guard_count": len(record.guards_text.splitlines()) if record.guards_text else 0,
            "graph_op_count": op_count,
            "graph_node_count": sum(len(g.gm.graph.nodes) for g in record.graphs),
            "graph_input_count": sum(
                1 for g in record.graphs for n in g.gm.graph.nodes if n.op == "placeholder"
            ),
            "start_time": record.start_time,
            "entire_frame_compile_time_s": round(sum(record.times.values()), 6),
            "backend_compile_time_s": round(record.times.get("backend_compile", 0.0), 6),
            "fail_type": "runs eagerly" if record.ran_eagerly else None,
            "fail_reason": record.ran_eagerly or None,
            "restart_reasons": [b.reason for b in record.breaks],
            "has_guarded_code": bool(record.guards_text),
        },
        None,
        cid,
    )


def finish(record: FrameRecord) -> None:
    """The frame's outcome is known: log it, trace it, dump it."""
    if _current and _current[-1] is record:
        _current.pop()
    try:
        _log(record)
        writer = _trace()
        if writer is not None:
            _trace_record(writer, record)
        dumper = _dumper()
        if dumper is not None:
            dumper.dump(record)
    except Exception as err:  # showing a compile must never break it
        print(f"Strata: could not log/trace/dump {record.where}: {err}", file=sys.stderr)
    finally:
        _latency.pop(id(record), None)
