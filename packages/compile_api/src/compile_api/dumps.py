"""Debug dumps: ``STRATA_COMPILE_DEBUG=1`` (or ``TORCH_COMPILE_DEBUG=1``).

One run folder, ``strata_compile_debug/run_<date>-pid_<pid>/``, and in it one folder per
compiled frame, ``<frame id>_<compile>_<function>/``, holding:

- ``fx_graph_readable_<graph>.py``: each captured graph with shapes, strides, devices and the
  user's source line above each statement
- ``aot_forward_graph_<n>.py``, ``aot_backward_graph_<n>.py`` (``aot_inference_graph``,
  ``aot_joint_graph``): aot's aten-level graphs, when the backend went through aot
- ``output_code_<n>.py``: inductor_lite's generated kernels and wrapper
- ``guards.txt``, ``bytecode.txt`` (original and transformed), ``graph_breaks.txt``,
  ``recompile_reasons.txt`` and ``runs_eagerly.txt`` where they apply.
"""

from __future__ import annotations

import os
import re
import time

from .readable import break_text, bytecode_text, graph_text, guards_text
from .state import FrameRecord

__all__ = ["DebugDumps"]


class DebugDumps:
    """Writes one folder per compiled frame under a run folder in ``parent``."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S")
        self.run_dir = os.path.join(
            parent, "strata_compile_debug", f"run_{stamp}-pid_{os.getpid()}"
        )

    def frame_dir(self, record: FrameRecord) -> str:
        """The folder of one compiled frame."""
        cid = record.compile_id.replace("/", "_")
        name = re.sub(r"[^\w.-]", "_", record.code.co_name)
        return os.path.join(self.run_dir, f"{cid}_{name}")

    def dump(self, record: FrameRecord) -> str:
        """Write ``record``'s files; the folder they are in."""
        folder = self.frame_dir(record)
        os.makedirs(folder, exist_ok=True)

        def write(name: str, text: str) -> None:
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(text if text.endswith("\n") else text + "\n")

        for graph in record.graphs:
            write(f"fx_graph_readable_{graph.name}.py", graph_text(graph.gm))
        counts: dict[str, int] = {}
        for kind, text in record.artifacts:
            n = counts[kind] = counts.get(kind, -1) + 1
            suffix = "txt" if kind == "perf_hints" else "py"
            write(f"{kind}_{n}.{suffix}", text)
        if record.transformed is not None:
            write("bytecode.txt", bytecode_text(record))
        if record.guards_text:
            write("guards.txt", guards_text(record))
        if record.breaks:
            write(
                "graph_breaks.txt",
                "\n\n".join(break_text(b) for b in record.breaks),
            )
        if record.recompile_reasons:
            write("recompile_reasons.txt", "\n".join(record.recompile_reasons))
        if record.ran_eagerly:
            write("runs_eagerly.txt", record.ran_eagerly)
        return folder
