"""MODULE_CALLS: the submodules a trace called under one ``_modules`` dict still run as traced.

When a trace inlines ``m.forward`` for a submodule ``m = parent._modules[key]``, the graph
assumes, on later calls: ``type(m)`` is the class it saw (a changed ``__class__`` runs other
code), ``m`` has no forward/backward (pre-)hooks (the inlined forward ran none), the instance
does not shadow ``forward`` with an attribute (when the class's forward was inlined), and the
class's ``forward`` is still the function inlined (monkeypatching recompiles).  One guard per
``_modules`` dict checks all of these for each called key.

Reads, as the caller's transformed code and ``nn.Module.__call__`` see them: ``modules[key]``,
``type(m)``, ``m.__dict__`` and, in it, the four hook dicts and ``'forward'`` (``nn.Module``
keeps its hook dicts as instance attributes; reading them from ``__dict__`` skips
``nn.Module``'s ``__getattr__`` slot), and ``cls.forward`` once per class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from guards.errors import GuardError, UnsupportedGuardValue
from guards.guard import CodeContext, Guard, type_name

__all__ = ["ModuleCalls", "HOOK_DICTS", "module_calls"]

#: The instance dicts nn.Module.__call__ consults for per-module hooks.
HOOK_DICTS: tuple[str, ...] = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)


@attrs.frozen
class ModuleCall:
    """One called submodule: ``modules[key]``, its class, the class forward inlined (None when
    the trace ran an attribute of the instance instead)."""

    key: str
    cls: type
    forward: object | None = attrs.field(eq=attrs.cmp_using(eq=lambda a, b: a is b))


def _python_check(calls: tuple[ModuleCall, ...]) -> Callable[[Any], bool]:
    """The pure-Python check (same reads and order as the C++ ``ModuleCallsCheck``)."""
    forwards: tuple[tuple[Any, object], ...] = tuple(
        dict.fromkeys((c.cls, c.forward) for c in calls if c.forward is not None)
    )
    items = tuple((c.key, c.cls, c.forward is not None) for c in calls)

    def check(modules: Any) -> bool:
        for cls, forward in forwards:
            if cls.forward is not forward:
                return False
        for key, cls, inlined in items:
            m = modules[key]
            if type(m) is not cls:
                return False
            d = m.__dict__
            if d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"]:
                return False
            if d["_backward_pre_hooks"] or (inlined and "forward" in d):
                return False
        return True

    return check


@attrs.frozen
class ModuleCalls(Guard):
    """Class, no hooks and the inlined forward of each called submodule of one ``_modules``."""

    kind: ClassVar[str] = "MODULE_CALLS"
    rank: ClassVar[int] = 5
    calls: tuple[ModuleCall, ...] = ()

    def merge(self, other: Guard) -> Guard:
        """Two captures over one ``_modules`` guard the union of their calls; the same key seen
        with another class or forward raises GuardError."""
        if not isinstance(other, ModuleCalls):
            return super().merge(other)
        by_key = {c.key: c for c in self.calls}
        for call in other.calls:
            old = by_key.setdefault(call.key, call)
            if old != call:
                raise GuardError(
                    f"MODULE_CALLS: {self._name()}[{call.key!r}] seen as "
                    f"{type_name(old.cls)} and as {type_name(call.cls)} (or with another forward)"
                )
        return attrs.evolve(self, calls=tuple(by_key.values()))

    def text(self) -> str:
        keys = ", ".join(repr(c.key) for c in self.calls)
        return (
            f"MODULE_CALLS: {self._name()} keys=[{keys}] "
            "(class, no hooks, the class forward inlined and not shadowed)"
        )

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            inlined = [c for c in self.calls if c.forward is not None]
            check: object = ctx.native.ModuleCallsCheck(
                tuple(dict.fromkeys((c.cls, c.forward) for c in inlined)),
                tuple((c.key, c.cls, c.forward is not None) for c in self.calls),
            )
            hint = "module_calls_check"
        else:
            check, hint = _python_check(self.calls), "module_calls"
        return [f"if not {ctx.bind(check, hint)}({var}): return False"]

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        name = self._name()
        for call in self.calls:
            if call.forward is not None and getattr(call.cls, "forward", None) is not call.forward:
                return f"{type_name(call.cls)}.forward is not the function the trace inlined"
        for call in self.calls:
            where = f"{name}[{call.key!r}]"
            try:
                m = value[call.key]  # type: ignore[index]
            except Exception as exc:
                return f"{where}: reading it raised {type(exc).__name__}: {exc}"
            if type(m) is not call.cls:
                return f"type({where}) is {type_name(call.cls)} expected, got {type_name(type(m))}"
            d = m.__dict__
            for hooks in HOOK_DICTS:
                if d[hooks]:
                    return f"{where} has {hooks} (the trace inlined a call without hooks)"
            if call.forward is not None and "forward" in d:
                return f"{where} shadows the class forward with an instance attribute"
        return None


def module_calls(source: Any, calls: Sequence[tuple[str, type, object | None]]) -> ModuleCalls:
    """The MODULE_CALLS guard for ``(key, class, class forward inlined or None)`` entries."""
    out: list[ModuleCall] = []
    for key, cls, forward in calls:
        if not isinstance(key, str) or not isinstance(cls, type):
            raise UnsupportedGuardValue(
                f"MODULE_CALLS entries are (str key, class, forward or None), got {key!r}, {cls!r}"
            )
        out.append(ModuleCall(key, cls, forward))
    if not out:
        raise UnsupportedGuardValue("MODULE_CALLS with no calls")
    merged = ModuleCalls(source, ()).merge(ModuleCalls(source, tuple(out)))  # checks duplicates
    assert isinstance(merged, ModuleCalls)
    return merged
