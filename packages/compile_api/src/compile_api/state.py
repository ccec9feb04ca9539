"""What compile_api remembers between calls: records of compiled frames, timings, warnings.

Everything here is cleared by ``reset()``.
"""

from __future__ import annotations

import threading
import types
from collections import defaultdict
from typing import Any, TypeAlias

import attrs

__all__ = ["FrameRecord", "RecordedGraph", "State", "state"]


@attrs.frozen
class RecordedGraph:
    """A graph a frame compiled: its global name and FX module (no example inputs)."""

    name: str
    gm: Any  # torch.fx.GraphModule


@attrs.define
class FrameRecord:
    """One compile of one frame: what was captured and what it cost."""

    code: types.CodeType
    transformed: types.CodeType | None
    backend: object
    graphs: list[RecordedGraph] = attrs.field(factory=list)
    breaks: list[Any] = attrs.field(factory=list)  # symbolic_vm.GraphBreak
    guards_text: str = ""
    recompile_reasons: list[str] = attrs.field(factory=list)
    ran_eagerly: str = ""  # why the frame runs eagerly, when it does
    times: dict[str, float] = attrs.field(factory=dict)
    # "<frame id>/<compile of that frame>", as torch numbers compiles (logs, tlparse, dumps)
    compile_id: str = ""
    # (kind, text) of what the backend produced: aot graphs, generated code (see observe.py)
    artifacts: list[tuple[str, str]] = attrs.field(factory=list)
    start_time: float = 0.0

    @property
    def where(self) -> str:
        return f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno})"


# A code object and the token of the compile() context that compiled it.
CodeKey: TypeAlias = tuple[types.CodeType, int]


@attrs.define
class State:
    lock: threading.RLock = attrs.field(factory=threading.RLock)
    records: list[FrameRecord] = attrs.field(factory=list)
    times: dict[str, list[float]] = attrs.field(factory=lambda: defaultdict(list))
    warned: set[object] = attrs.field(factory=set)
    # (code object, context token) -> (source, sizes) of every tensor its entries'
    # TENSOR_MATCH guards checked
    tensor_sizes: dict[CodeKey, list[tuple[Any, tuple[int | None, ...]]]] = attrs.field(
        factory=dict
    )
    # (code object, context token) -> {source: dims made dynamic by automatic dynamic}
    auto_dynamic: dict[CodeKey, dict[Any, frozenset[int]]] = attrs.field(factory=dict)
    # (code object, context token) -> (source, value) of every int or float its CONSTANT_MATCH
    # guards checked, and the sources automatic dynamic made symbols (floats: optimizer lrs)
    int_values: dict[CodeKey, list[tuple[Any, object]]] = attrs.field(factory=dict)
    auto_dynamic_ints: dict[CodeKey, set[Any]] = attrs.field(factory=dict)
    # (globals dict, name) pairs this process installed, removed by reset()
    installed: list[tuple[dict[str, Any], str]] = attrs.field(factory=list)
    skip_codes: set[types.CodeType] = attrs.field(factory=set)
    # code objects that hit cache_size_limit: a frame of one running its original code is an
    # eager run past the limit, and the frames it calls are not compiled either
    past_limit: set[types.CodeType] = attrs.field(factory=set)

    def running_installed_code(self, frame: types.FrameType | None) -> bool:
        """Whether ``frame`` or a caller runs code that looks up a global installed here (a
        transformed frame, or a resume function, between its graphs)."""
        with self.lock:
            by_namespace: dict[int, set[str]] = {}
            for namespace, name in self.installed:
                by_namespace.setdefault(id(namespace), set()).add(name)
        while frame is not None:
            names = by_namespace.get(id(frame.f_globals))
            if names and not names.isdisjoint(frame.f_code.co_names):
                return True
            frame = frame.f_back
        return False

    def clear(self, *, keep_installed: bool = False) -> None:
        """Forget everything; ``keep_installed`` leaves the installed globals in place (code
        that is running may still look them up)."""
        with self.lock:
            self.records.clear()
            self.times.clear()
            self.warned.clear()
            self.tensor_sizes.clear()
            self.auto_dynamic.clear()
            self.int_values.clear()
            self.auto_dynamic_ints.clear()
            self.past_limit.clear()
            if keep_installed:
                return
            for namespace, name in self.installed:
                namespace.pop(name, None)
            self.installed.clear()


state = State()
