"""MODULE_PARAMS (prototype): the parameters of an nn.Module tree, read through its own dicts.

A trace that used a module's parameters depends on (1) which submodule objects sit at each
path it read through, (2) which parameter objects sit in their ``_parameters``, and (3) each
parameter's metadata.  Guarding each parameter as ``L['self'].layers[0].weight`` pays
``Sequential.__getitem__`` and ``nn.Module.__getattr__`` (Python functions) per step; this
guard reads ``m._modules['layers']._modules['0']._parameters['weight']`` (plain dict reads),
checks the identity of every module and parameter on the way (weak references: a collected
one fails forever), and then the full TENSOR_MATCH metadata of each parameter.

Soundness: identity is never used to skip a metadata check.  A parameter object's metadata is
mutable in place (``p.data = other`` changes sizes, dtype, device and dispatch keys;
``p.requires_grad_()``, ``p.t_()``, ``p.resize_()``), so every call re-reads it.  Identity
only tells the reader that the object a graph was built around is still the one at that path
(what a graph that holds parameters as attributes, instead of taking them as inputs, needs).

Without identity (``identity=False``, for a module that is an argument of a frame shared by
several modules of one class: the layers of a stack) the same reads and metadata checks run on
whatever module is passed, and the transformed code reads the parameters through the same
paths, so one compiled frame serves every module whose parameters match.

This reads parameters through ``_modules``/``_parameters``; a caller whose transformed code
reads them another way (``Sequential.__getitem__``, ``__getattr__``) must read them the same
way as this guard, or the guard checks an object the code does not use.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

import attrs
import torch

from guards.errors import GuardError, UnsupportedGuardValue
from guards.guard import CodeContext, Guard
from guards.native import module_params_check
from guards.source import AttrSource, ItemSource, Source
from guards.tensor_guard import TensorMatch
from guards.tensor_spec import tensor_spec

__all__ = ["ModuleParams", "module_params"]


@attrs.frozen
class _Step:
    """One submodule or parameter: read ``parent._modules[key]`` or ``._parameters[key]``."""

    parent: int  # index of the parent step; -1 = the guarded root module
    dict_name: str  # "_modules" or "_parameters"
    key: str
    source: Source
    ref: Any = attrs.field(eq=False, repr=False)  # weakref.ref to the object seen at capture
    match: TensorMatch | None = None  # parameters only


@attrs.frozen
class ModuleParams(Guard):
    """Identity of every submodule and parameter on the used paths + each parameter's metadata."""

    kind: ClassVar[str] = "MODULE_PARAMS"
    rank: ClassVar[int] = 5
    root_ref: Any = attrs.field(eq=False, repr=False)
    steps: tuple[_Step, ...] = ()
    identity: bool = True  # False: metadata only, on any module at the source (module doc)

    def merge(self, other: Guard) -> Guard:
        """Two MODULE_PARAMS on one module (e.g. from two inlined calls) guard the union of
        their parameters; a parameter recorded with other metadata than now raises GuardError."""
        root = self.root_ref()
        if (
            not isinstance(other, ModuleParams) or root is None or other.root_ref() is not root
            or other.identity != self.identity
        ):
            return super().merge(other)
        names = list(dict.fromkeys([*self.names(), *other.names()]))
        merged = module_params(self.source_or_fail(), root, names, identity=self.identity)
        now = {s.source: s.match for s in merged.parameters}
        for step in [*self.parameters, *other.parameters]:
            if now.get(step.source) != step.match:
                raise GuardError(
                    f"MODULE_PARAMS: {step.source.describe()} changed between two captures"
                )
        return merged

    def names(self) -> list[str]:
        """The dotted parameter names this guard covers, in check order."""
        paths: list[str] = []
        for step in self.steps:
            prefix = "" if step.parent < 0 else paths[step.parent] + "."
            paths.append(prefix + step.key)
        return [p for p, s in zip(paths, self.steps, strict=True) if s.match is not None]

    def source_or_fail(self) -> Source:
        """The root module's source (always set for this kind)."""
        assert self.source is not None
        return self.source

    @property
    def parameters(self) -> list[_Step]:
        """The parameter steps, in check order."""
        return [s for s in self.steps if s.match is not None]

    def text(self) -> str:
        n_mod = len(self.steps) - len(self.parameters)
        what = "identity of each" if self.identity else "any module of this layout"
        lines = [
            f"MODULE_PARAMS: {self._name()} submodules={n_mod} parameters={len(self.parameters)} "
            f"({what}, read through _modules/_parameters; metadata of each parameter:)"
        ]
        lines += [f"    {s.match.text()}" for s in self.parameters if s.match is not None]
        return "\n".join(lines)

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            steps = [
                (s.parent, s.dict_name, s.key, s.ref, None if s.match is None else s.match.spec)
                for s in self.steps
            ]
            check = module_params_check(ctx.native, self.root_ref, steps, self.identity)
            if check is not None:
                # The same reads, identities and full metadata, in one C++ call.
                return [f"if not {ctx.bind(check, 'module_params_check')}({var}): return False"]
        return self.emit_python(var, ctx)

    def emit_python(self, var: str, ctx: CodeContext) -> list[str]:
        """The pure-Python statements of ``emit``."""
        out: list[str] = []
        if self.identity:
            root_ref = ctx.bind(self.root_ref, "ref")
            out.append(f"if {var} is not {root_ref}() or {var} is None: return False")
        names: list[str] = []
        # Each parent's _modules / _parameters once (as the transformed code reads them).
        containers: dict[tuple[int, str], str] = {}
        for step in self.steps:
            parent = var if step.parent < 0 else names[step.parent]
            name = ctx.temp("p" if step.match is not None else "m")
            names.append(name)
            container = containers.get((step.parent, step.dict_name))
            if container is None:
                container = containers[(step.parent, step.dict_name)] = ctx.temp("d")
                out.append(f"{container} = {parent}.{step.dict_name}")
            out.append(f"{name} = {container}[{step.key!r}]")
            if self.identity:
                ref = ctx.bind(step.ref, "ref")
                out.append(f"if {name} is not {ref}() or {name} is None: return False")
            if step.match is not None:
                # Full metadata on every call: identity is not a cache of it (see module doc).
                out.extend(step.match.emit(name, ctx))
        return out

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        if self.identity and (value is not self.root_ref() or value is None):
            return f"{self._name()} is not the guarded module"
        values: list[object] = []
        for step in self.steps:
            parent = value if step.parent < 0 else values[step.parent]
            try:
                obj = getattr(parent, step.dict_name)[step.key]
            except Exception as exc:
                return f"{step.source.describe()}: reading it raised {type(exc).__name__}: {exc}"
            target = step.ref()
            if self.identity and (obj is not target or obj is None):
                what = "parameter" if step.match is not None else "submodule"
                if target is None:
                    return f"{step.source.describe()}: the guarded {what} no longer exists"
                return f"{step.source.describe()}: another {what} object than the guarded one"
            if step.match is not None:
                problem = step.match.explain(obj, f_locals, f_globals)
                if problem is not None:
                    return problem
            values.append(obj)
        return None


def module_params(
    source: Source, module: torch.nn.Module, names: list[str], *, identity: bool = True
) -> ModuleParams:
    """The MODULE_PARAMS guard for parameters ``names`` (dotted, as ``named_parameters``);
    ``identity=False`` checks them on any module at ``source`` (see the module doc)."""
    if not isinstance(module, torch.nn.Module):
        raise UnsupportedGuardValue(f"MODULE_PARAMS on a {type(module).__name__}")
    steps: list[_Step] = []
    index: dict[tuple[str, ...], int] = {}
    for dotted in names:
        *path, leaf = dotted.split(".")
        parent, parent_src, owner = -1, source, module
        for depth in range(len(path)):
            prefix = tuple(path[: depth + 1])
            owner = owner._modules[path[depth]]  # type: ignore[assignment]
            if owner is None:
                raise UnsupportedGuardValue(f"MODULE_PARAMS: submodule {dotted} is None")
            src = ItemSource(AttrSource(parent_src, "_modules"), path[depth])
            if prefix not in index:
                index[prefix] = len(steps)
                steps.append(_Step(parent, "_modules", path[depth], src, weakref.ref(owner)))
            parent, parent_src = index[prefix], src
        param = owner._parameters.get(leaf)
        if param is None:
            raise UnsupportedGuardValue(f"MODULE_PARAMS: {dotted} is not a parameter")
        src = ItemSource(AttrSource(parent_src, "_parameters"), leaf)
        match = TensorMatch(src, tensor_spec(param))
        steps.append(_Step(parent, "_parameters", leaf, src, weakref.ref(param), match))
    return ModuleParams(source, weakref.ref(module), tuple(steps), identity)
