"""The structured trace that tlparse reads: ``TORCH_TRACE=<dir>`` or ``STRATA_TRACE=<dir>``.

One file per process in that directory. Each record is a glog-style line
(``V1126 15:12:27.959000 <pid> <file>:<line>] ``) followed by a JSON envelope naming the record
kind and its metadata, the compile id (``frame_id``, ``frame_compile_id``, ``attempt``) and,
when a payload follows, its md5 (``has_payload``); the payload's lines come next, each behind a
tab. File names in stacks are interned: a ``{"str": [name, index]}`` record comes first.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import IO, Any

__all__ = ["TraceWriter"]


class TraceWriter:
    """Appends structured records to one log file under ``directory``."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        stamp = time.strftime("%Y%m%d_%H%M%S")
        self.path = os.path.join(directory, f"dedicated_log_strata_trace_{os.getpid()}_{stamp}.log")
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (process-long)
        self._lock = threading.Lock()
        self._strings: dict[str, int] = {}

    def intern(self, text: str) -> int:
        """The index of ``text`` in the string table, writing its record the first time."""
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self._strings)
            self._write({"str": [text, index]}, None)
        return index

    def emit(
        self,
        kind: str,
        metadata: dict[str, Any] | None = None,
        payload: str | None = None,
        compile_id: str = "",
    ) -> None:
        """Write one record of ``kind`` for compile ``"<frame>/<compile>"`` (empty: none)."""
        envelope: dict[str, Any] = {kind: metadata or {}}
        if compile_id:
            frame_id, _, frame_compile_id = compile_id.partition("/")
            envelope.update(
                frame_id=int(frame_id), frame_compile_id=int(frame_compile_id), attempt=0
            )
        self._write(envelope, payload)

    def _write(self, envelope: dict[str, Any], payload: str | None) -> None:
        if payload is not None:
            envelope["has_payload"] = hashlib.md5(payload.encode("utf-8")).hexdigest()
        now = time.time()
        prefix = (
            time.strftime("V%m%d %H:%M:%S", time.localtime(now))
            + f".{int((now % 1) * 1e6):06d} {os.getpid()} compile_api/trace.py:0] "
        )
        text = prefix + json.dumps(envelope) + "\n"
        if payload is not None:
            text += "".join(f"\t{line}\n" for line in payload.split("\n"))
        with self._lock:
            self._file.write(text)
            self._file.flush()

    def close(self) -> None:
        self._file.close()
