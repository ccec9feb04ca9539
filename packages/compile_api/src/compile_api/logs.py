"""Log channels on the standard logging module: set_logs(...) and STRATA_LOGS."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["CHANNELS", "channel", "set_logs"]

# Each channel is a logger named strata.<channel>; messages are emitted at DEBUG level.
CHANNELS = ("graph_breaks", "guards", "recompiles", "dynamic", "bytecode", "graph_code")

_handler: logging.Handler | None = None


def channel(name: str) -> logging.Logger:
    """The logger of one channel (``strata.graph_breaks`` ...)."""
    if name not in CHANNELS:
        raise ValueError(f"unknown log channel {name!r}; channels are {', '.join(CHANNELS)}")
    return logging.getLogger(f"strata.{name}")


class _CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (pytest, redirections)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        del value


def _stderr_handler() -> logging.Handler:
    global _handler
    if _handler is None:
        _handler = _CurrentStderrHandler()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    return _handler


def set_logs(
    *,
    graph_breaks: bool | None = None,
    guards: bool | None = None,
    recompiles: bool | None = None,
    dynamic: bool | None = None,
    bytecode: bool | None = None,
    graph_code: bool | None = None,
) -> None:
    """Turn log channels on (True) or off (False); None leaves a channel as it is.

    A channel that is on logs at DEBUG level to ``strata.<channel>`` and prints to stderr.
    """
    wanted = {
        "graph_breaks": graph_breaks,
        "guards": guards,
        "recompiles": recompiles,
        "dynamic": dynamic,
        "bytecode": bytecode,
        "graph_code": graph_code,
    }
    for name, on in wanted.items():
        if on is None:
            continue
        logger = channel(name)
        handler = _stderr_handler()
        if on:
            logger.setLevel(logging.DEBUG)
            if handler not in logger.handlers:
                logger.addHandler(handler)
        else:
            logger.setLevel(logging.WARNING)
            if handler in logger.handlers:
                logger.removeHandler(handler)


def load_env(environ: dict[str, str] | None = None) -> None:
    """Apply STRATA_LOGS="graph_breaks,recompiles" (comma-separated channel names)."""
    env = os.environ if environ is None else environ
    spec = env.get("STRATA_LOGS", "")
    names = [part.strip() for part in spec.split(",") if part.strip()]
    for name in names:
        if name not in CHANNELS:
            raise ValueError(
                f"STRATA_LOGS names unknown channel {name!r}; channels are {', '.join(CHANNELS)}"
            )
    set_logs(**dict.fromkeys(names, True))  # type: ignore[arg-type]
