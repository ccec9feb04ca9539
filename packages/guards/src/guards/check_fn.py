"""compile_guards: one flat generated Python function checking a whole GuardSet.

The generated function has the shape::

    def ___guard_check(L):   # globals: G=<f_globals>, ___type_0=<class>, ...
        try:
            v0 = L['x']
            if type(v0) is not ___tensor_type_1: return False
            ...
        except Exception:
            return False
        return True

It is a plain function: ``CompiledGuards.check`` (what a caller with a hot path should call:
~40 ns less per call than calling the object, measured) and, as a static method, the
``__call__`` of the returned object.
Constants (classes, dtypes, weakrefs, torch functions) are the globals of the generated
function's own namespace dict (``G`` is the frame's globals among them): a specialised
LOAD_GLOBAL is as cheap as a local load, and unlike keyword-only defaults (the first
design) nothing is filled in per call -- CPython looks up each missing keyword-only default
in ``__kwdefaults__`` on every call, ~7 ns per constant, measured.  Each source is
read once into a local, in check order, bases before the values read through them.  Any
exception while checking means "guard failed" (3.11 ``try`` is free until something raises).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable
from typing import Any

import torch

from guards.guard import Guard
from guards.guard_set import GuardSet
from guards.native import native_module
from guards.source import LocalSource, Source
from guards.state_guards import DispatchTls
from guards.state_trees import StateTreePlan, plan_trees, state_trees_on
from guards.tensor_guard import TensorMatch

__all__ = ["CompiledGuards", "compile_guards"]

log = logging.getLogger("strata.guard_building")

_FN_NAME = "___guard_check"


class _CodeGen:
    """Collects constant bindings and local names while guards emit their statements."""

    def __init__(self, tls_exclude_checked: int | None, native: Any) -> None:
        self.consts: dict[str, object] = {}
        self._const_ids: dict[int, str] = {}
        self._temps = 0
        self._tls_exclude_checked = tls_exclude_checked
        self._native = native
        self.body: list[str] = []
        self._local_of: dict[Source, str] = {}
        self._vars = 0
        self._preset: dict[Source, str] = {}  # sources a state tree returns: their expression
        self.helpers: list[str] = []  # more generated functions (state tree reads)

    def emit_guard(self, guard: Guard) -> None:
        """Append ``guard``'s statements (reading its source first)."""
        var = self.load(guard.source) if guard.source is not None else ""
        lines = guard.emit(var, self)  # may read its operands into self.body first
        self.body.append(f"# {guard.kind}")
        self.body.extend(lines)

    def emit_state_tree(self, plan: StateTreePlan) -> None:
        """The plan's covered guards, run only when its StateTree says something on their
        paths changed since they last passed, and then re-arming it.  Reads made inside that
        branch are forgotten after it; later guards read the tree's exported nodes from the
        tuple it returns (or, when it cannot be armed, from a plain Python read of them)."""
        root = self.load(plan.root) if isinstance(plan.root, LocalSource) else "G"
        tree = self._native.StateTree(1, plan.steps)
        check = self.bind(tree, "state_tree")
        arm = self.bind(tree.arm, "arm")
        nodes = self.temp("t")
        self.body.append(f"{nodes} = {check}({root})")
        self.body.append(f"if {nodes} is None:")
        known = dict(self._local_of)
        start = len(self.body)
        for guard in plan.covered:
            self.emit_guard(guard)
        self.body.append(f"{nodes} = {arm}({root})")
        if plan.exports:
            read = self._reader(plan)
            self.body.append(f"if {nodes} is None: {nodes} = {read}({root})")
        self.body[start:] = [f"    {line}" for line in self.body[start:]]
        self._local_of = known
        for k, source in enumerate(plan.exports):
            self._preset[source] = f"{nodes}[{k}]"

    def _reader(self, plan: StateTreePlan) -> str:
        """The name of a generated function reading ``plan.exports`` from the tree's root the
        way the check reads sources (for a tree that cannot be armed)."""
        local_of: dict[Source, str] = {}
        if isinstance(plan.root, LocalSource):
            local_of[plan.root] = "r"
        body: list[str] = []

        def load(source: Source) -> str:
            var = local_of.get(source)
            if var is None:
                base = source.base
                expr = source.render(load(base) if base is not None else "", self.bind)
                var = local_of[source] = f"v{len(local_of)}"
                body.append(f"    {var} = {expr}")
            return var

        out = [load(source) for source in plan.exports]
        name = f"___read_nodes_{len(self.helpers)}"
        self.helpers.append(
            "\n".join([f"def {name}(r):", *body, f"    return ({', '.join(out)},)"])
        )
        return name

    @property
    def tls_exclude_checked(self) -> int | None:
        return self._tls_exclude_checked

    @property
    def native(self) -> Any:
        return self._native

    def bind(self, value: object, hint: str) -> str:
        name = self._const_ids.get(id(value))
        if name is None:
            name = f"___{hint}_{len(self.consts)}"
            self.consts[name] = value
            self._const_ids[id(value)] = name
        return name

    def temp(self, hint: str) -> str:
        self._temps += 1
        return f"{hint}{self._temps}"

    def load(self, source: Source) -> str:
        """The local holding ``source``: read here, unconditionally, unless already read."""
        var = self._local_of.get(source)
        if var is not None:
            return var
        expr = self._preset.get(source)
        if expr is None:
            base = source.base
            base_expr = self.load(base) if base is not None else ""
            expr = source.render(base_expr, self.bind)
        var = f"v{self._vars}"
        self._vars += 1
        self._local_of[source] = var
        self.body.append(f"{var} = {expr}")
        return var


def _generate(guards: list[Guard]) -> tuple[str, dict[str, object]]:
    tls = [g for g in guards if isinstance(g, DispatchTls)]
    native = native_module()
    gen = _CodeGen(tls[0].exclude_raw if tls else None, native)
    in_trees: set[int] = set()
    plans: list[StateTreePlan] = []
    if native is not None and hasattr(native, "StateTree") and state_trees_on():
        try:
            plans = plan_trees(guards)
        except Exception:
            # State trees only make a check faster: a failure to plan them must not leave a
            # frame unguardable (it would run eagerly), so the check goes without them.
            log.warning("guards: checking without state trees (planning them failed)",
                        exc_info=True)  # fmt: skip
    for plan in plans:
        gen.emit_state_tree(plan)
        in_trees.update(id(g) for g in plan.covered)
    for guard in guards:
        if id(guard) not in in_trees:
            gen.emit_guard(guard)
    body = gen.body

    lines = [f"def {_FN_NAME}(L):", "    try:"]
    if any(isinstance(g, TensorMatch) and g.reads_through_override() for g in guards):
        # Python reads of a tensor subclass's metadata (TENSOR_MATCH's Python path, sizes in
        # SHAPE predicates) read what the TensorImpl holds, as the C++ check does: a guard
        # never runs the user's __torch_function__.
        no_override = gen.bind(torch._C.DisableTorchFunctionSubclass, "no_torch_function")
        lines.append(f"        with {no_override}():")
        body = [f"    {line}" for line in body]
    lines += [f"        {line}" for line in body]
    lines += ["    except Exception:", "        return False", "    return True"]
    return "\n".join([*lines, *gen.helpers]) + "\n", gen.consts


class CompiledGuards:
    """The compiled check of a GuardSet, usable as ``evalframe.Entry.guard``.

    ``guards(f_locals)`` -> bool never raises.  ``failures(f_locals)`` says in words which
    guards fail (slow; for recompile logs).  ``text`` lists the guards, one per line;
    ``source_code`` is the generated check function and ``check`` the same as calling the
    object.
    """

    def __init__(self, guards: list[Guard], f_globals: dict[str, Any]) -> None:
        """Generate and compile the check for ``guards`` (already in check order)."""
        self.guards: list[Guard] = guards
        self.f_globals = f_globals
        self.source_code, consts = _generate(guards)
        namespace: dict[str, object] = {"G": f_globals, **consts}
        exec(compile(self.source_code, "<strata guards>", "exec"), namespace)
        # The generated function becomes this object's own __call__ (a static method of a
        # one-off subclass): calling the object then costs one Python frame, not two (~130 ns
        # less than delegating, measured).  ``check`` is the plain function itself: calling
        # it skips the type's __call__ slot lookup (~40 ns less again, measured); it carries
        # ``failures`` and ``compiled_guards`` so it can stand in for the object as
        # evalframe.Entry.guard.
        fn = namespace[_FN_NAME]
        assert isinstance(fn, types.FunctionType)
        self.__class__ = type("CompiledGuards", (CompiledGuards,), {"__call__": staticmethod(fn)})
        vars(fn).update(failures=self.failures, compiled_guards=self)
        self.check: Callable[[dict[str, object]], bool] = fn

    def __call__(self, f_locals: dict[str, object]) -> bool:
        """True when every guard holds for ``f_locals``; never raises."""
        return self.check(f_locals)  # replaced per instance in __init__

    @property
    def text(self) -> str:
        """The guards as text, one per line, in check order."""
        return "\n".join(g.text() for g in self.guards)

    def failures(self, f_locals: dict[str, object]) -> list[str]:
        """Each failed guard in words, in check order; empty exactly when the check passes."""
        values: dict[Source, object] = {}
        errors: dict[Source, str] = {}
        read = functools.partial(self._read, values=values, errors=errors, f_locals=f_locals)
        out: list[str] = []
        for guard in self.guards:
            value: object = None
            if guard.source is not None:
                read(guard.source)
                if guard.source in errors:
                    out.append(
                        f"{guard.kind} {guard.source.name()}: reading it raised "
                        f"{errors[guard.source]}"
                    )
                    continue
                value = values[guard.source]
            try:
                with torch._C.DisableTorchFunctionSubclass():  # read as the check reads
                    problem = guard.explain(value, f_locals, self.f_globals)
            except Exception as exc:
                problem = (
                    f"{guard.kind} {guard._name()}: checking raised {type(exc).__name__}: {exc}"
                )
            if problem is not None:
                out.append(problem)
        return out

    def _read(
        self,
        source: Source,
        *,
        values: dict[Source, object],
        errors: dict[Source, str],
        f_locals: dict[str, object],
    ) -> None:
        """The same reads, in the same order, as the generated check: bases first, once.

        A method, not a closure calling itself: such a closure is a reference cycle that kept
        the frame's locals (a generator left suspended, the user's tensors) alive until the
        next garbage collection, after each recompile.
        """
        if source in values or source in errors:
            return
        base = source.base
        if base is not None:
            self._read(base, values=values, errors=errors, f_locals=f_locals)
            if base in errors:
                errors[source] = errors[base]
                return
        try:
            base_value = values[base] if base is not None else None
            values[source] = source.get(base_value, f_locals, self.f_globals)
        except Exception as exc:
            errors[source] = f"{type(exc).__name__}: {exc}"

    def __repr__(self) -> str:
        return f"CompiledGuards({len(self.guards)} guards)"


def compile_guards(guard_set: GuardSet, f_globals: dict[str, Any]) -> CompiledGuards:
    """Compile ``guard_set`` into one check function over a frame's ``f_locals``.

    ``f_globals`` is the function's globals dict itself (not a copy): guards on globals read
    it when they run, so rebinding a global is seen.
    """
    compiled = CompiledGuards(guard_set.guards, f_globals)
    log.debug("compiled %d guards:\n%s", len(compiled.guards), compiled.source_code)
    return compiled
