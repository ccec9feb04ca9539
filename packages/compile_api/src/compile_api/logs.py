"""Log channels on the standard logging module: set_logs(...), STRATA_LOGS and TORCH_LOGS.

Each channel is a logger ``strata.<channel>`` whose messages are emitted at DEBUG level. The
channel names are torch's (``TORCH_LOGS="graph_breaks,recompiles"`` means the same under
Strata), and so is the verbosity syntax: ``+dynamo`` turns every ``strata.*`` logger to DEBUG,
``dynamo`` to INFO. What torch's own logging was asked for (``TORCH_LOGS`` as torch parsed it
at import, or ``torch._logging.set_logs(...)`` from user code) is read from torch's logging state
at each compile, so both spellings work without Strata calling into torch's compiler.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

__all__ = [
    "CHANNELS",
    "channel",
    "enabled",
    "parse_spec",
    "refresh_from_torch",
    "set_logs",
    "wanted",
]

CHANNELS = (
    "graph_breaks",
    "guards",
    "recompiles",
    "dynamic",
    "bytecode",
    "graph_code",
    "aot_graphs",
    "output_code",
    "perf_hints",
    # Strata's own: inductor_lite's layout/fusion/aten-or-kernel decisions and their numbers
    "kernel_choices",
)

# torch's names that mean one of our channels.
_ALIASES = {
    "recompiles_verbose": "recompiles",
    "graph": "graph_code",
    "aot_joint_graph": "aot_graphs",
    "post_grad_graphs": "aot_graphs",
    "kernel_code": "output_code",
    "schedule": "output_code",
    "fusion": "perf_hints",
}
# torch's component loggers (``+dynamo``) and the Strata loggers they stand for.
_COMPONENTS = {
    "dynamo": "strata",
    "all": "strata",
    "aot": "strata.aot",
    "inductor": "strata.inductor_lite",
    "dynamic": "strata.dynamic",
    "guards": "strata.guards",
}
# torch's components whose level in torch's logging state we follow (their logger names are
# looked up in torch's log registry by these aliases).
_TORCH_COMPONENTS = ("dynamo", "aot", "inductor", "dynamic")

_handler: logging.Handler | None = None
# What user code and STRATA_LOGS asked for, and what torch's state asked for; applied together.
_own: dict[str, bool] = {}
_own_levels: dict[str, int] = {}
_from_torch: tuple[frozenset[str], tuple[tuple[str, int], ...]] = (frozenset(), ())
_warned: set[str] = set()


def channel(name: str) -> logging.Logger:
    """The logger of one channel (``strata.graph_breaks`` ...)."""
    if name not in CHANNELS:
        raise ValueError(f"unknown log channel {name!r}; channels are {', '.join(CHANNELS)}")
    return logging.getLogger(f"strata.{name}")


def enabled(name: str) -> bool:
    """True when channel ``name`` would emit (asked for, or its logger set to DEBUG)."""
    return channel(name).isEnabledFor(logging.DEBUG)


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


# The level this module last gave each logger: set again only when what is asked changes, so
# a level set from elsewhere (pytest's caplog, the user's logging config) is not undone at
# every compile.
_applied: dict[str, int] = {}


def _set_level(logger: logging.Logger, level: int) -> None:
    if _applied.get(logger.name) != level:
        _applied[logger.name] = level
        logger.setLevel(level)


def wanted(name: str) -> bool:
    """True when channel ``name`` was asked for (by set_logs, STRATA_LOGS or torch's state)."""
    return _own.get(name, name in _from_torch[0])


def _apply() -> None:
    """Set every channel's level and our stderr handler from what was asked, once each.

    With a verbosity on ``strata`` (``+dynamo``) the handler sits on ``strata`` alone, so a
    channel's record is printed once, not once per logger it propagates through.
    """
    handler = _stderr_handler()
    torch_channels, torch_levels = _from_torch
    levels = dict(torch_levels)
    levels.update(_own_levels)
    root = logging.getLogger("strata")
    on_root = "strata" in levels
    for name in CHANNELS:
        logger = channel(name)
        on = _own.get(name, name in torch_channels)
        component = levels.get(logger.name)
        if on:
            _set_level(logger, logging.DEBUG)
        elif component is not None:
            _set_level(logger, component)
        elif name in _own:  # turned off explicitly
            _set_level(logger, logging.WARNING)
        if (on or component is not None) and not on_root:
            if handler not in logger.handlers:
                logger.addHandler(handler)
        elif handler in logger.handlers:
            logger.removeHandler(handler)
    for qname, level in levels.items():
        if qname.startswith("strata.") and qname.removeprefix("strata.") in CHANNELS:
            continue
        logger = logging.getLogger(qname)
        _set_level(logger, level)
        if (qname == "strata" or not on_root) and handler not in logger.handlers:
            logger.addHandler(handler)
    if not on_root and handler in root.handlers:
        root.removeHandler(handler)


def set_logs(
    *,
    graph_breaks: bool | None = None,
    guards: bool | None = None,
    recompiles: bool | None = None,
    dynamic: bool | None = None,
    bytecode: bool | None = None,
    graph_code: bool | None = None,
    aot_graphs: bool | None = None,
    output_code: bool | None = None,
    perf_hints: bool | None = None,
    kernel_choices: bool | None = None,
    dynamo: int | None = None,
) -> None:
    """Turn log channels on (True) or off (False); None leaves a channel as it is.

    A channel that is on logs at DEBUG level to ``strata.<channel>`` and prints to stderr.
    ``dynamo=logging.DEBUG`` sets every ``strata.*`` logger to that level (torch's ``+dynamo``).
    """
    wanted = {
        "graph_breaks": graph_breaks,
        "guards": guards,
        "recompiles": recompiles,
        "dynamic": dynamic,
        "bytecode": bytecode,
        "graph_code": graph_code,
        "aot_graphs": aot_graphs,
        "output_code": output_code,
        "perf_hints": perf_hints,
        "kernel_choices": kernel_choices,
    }
    for name, on in wanted.items():
        if on is not None:
            _own[name] = on
            _applied.pop(f"strata.{name}", None)  # an explicit call always sets the level
    if dynamo is not None:
        _own_levels["strata"] = dynamo
        _applied.pop("strata", None)
    _apply()


def _warn_unknown(name: str, source: str) -> None:
    if name in _warned:
        return
    _warned.add(name)
    known = ", ".join((*CHANNELS, *sorted(_ALIASES), "+dynamo", "+aot", "+inductor"))
    warnings.warn(
        f"{source} names {name!r}, which Strata does not know; it is ignored. "
        f"Known names: {known}",
        UserWarning,
        stacklevel=3,
    )


def parse_spec(spec: str, source: str = "STRATA_LOGS") -> tuple[set[str], dict[str, int]]:
    """``"graph_breaks,+dynamo,-inductor"`` -> (channels, {logger name: level}).

    Names are torch's: a channel (or torch's alias of one), or a component (``dynamo``,
    ``aot``, ``inductor``, ``dynamic``) with ``+`` for DEBUG, nothing for INFO, ``-`` for
    ERROR. An unknown name warns once and is ignored; nothing here raises.
    """
    channels: set[str] = set()
    levels: dict[str, int] = {}
    for raw in spec.replace(" ", "").split(","):
        if not raw:
            continue
        sign = raw[0] if raw[0] in "+-" else ""
        name = raw[len(sign):]
        if not sign and name in CHANNELS:
            channels.add(name)
        elif not sign and name in _ALIASES:
            channels.add(_ALIASES[name])
        elif name in _COMPONENTS:
            level = {"+": logging.DEBUG, "-": logging.ERROR, "": logging.INFO}[sign]
            levels[_COMPONENTS[name]] = level
            if name == "all" and sign != "-":
                channels.update(CHANNELS)
        else:
            _warn_unknown(raw, source)
    return channels, levels


def load_env(environ: dict[str, str] | None = None) -> None:
    """Apply ``STRATA_LOGS`` (torch's syntax: ``"graph_breaks,recompiles,+dynamo"``)."""
    env = os.environ if environ is None else environ
    channels, levels = parse_spec(env.get("STRATA_LOGS", ""))
    for name in channels:
        _own[name] = True
    _own_levels.update(levels)
    if channels or levels:
        _apply()


def refresh_from_torch() -> None:
    """Follow what torch's logging state asks for (``TORCH_LOGS``, ``torch._logging.set_logs``).

    Read from ``torch._logging``'s state (no compiler module is touched); called at each
    compile, so a ``set_logs`` made after import counts from the next compile on.
    """
    global _from_torch
    internal = sys.modules.get("torch._logging._internal")
    state = getattr(internal, "log_state", None)
    if state is None:
        return
    try:
        artifacts = set(state.artifact_names)
        qnames = dict(state.log_qname_to_level)
        aliases = internal.log_registry.log_alias_to_log_qnames  # type: ignore[union-attr]
        first = {c: aliases[c][0] for c in _TORCH_COMPONENTS if aliases.get(c)}
    except Exception:  # another torch's layout: nothing to follow
        return
    channels = {_ALIASES.get(a, a) for a in artifacts} & set(CHANNELS)
    levels: dict[str, int] = {}
    for component, qname in first.items():
        level = qnames.get(qname)
        if level is None or level > logging.INFO:
            continue
        if component == "dynamic":
            channels.add("dynamic")
        else:
            levels[_COMPONENTS[component]] = level
    wanted = (frozenset(channels), tuple(sorted(levels.items())))
    if wanted != _from_torch:
        _from_torch = wanted
        _apply()
