"""GuardSet: the guards a compiled frame depends on, added by kind and merged by key."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch

from guards.errors import GuardError, UnsupportedGuardValue
from guards.global_state import capture_global_state
from guards.guard import Guard
from guards.module_calls import module_calls
from guards.module_params import module_params
from guards.shape_guard import Shape
from guards.source import Source
from guards.state_guards import DispatchTls, GlobalState
from guards.tensor_guard import TensorMatch
from guards.tensor_spec import tensor_spec
from guards.value_guards import ConstantMatch, DictKeys, IdMatch, Length, TypeMatch

__all__ = ["GuardSet"]

log = logging.getLogger("strata.guard_building")

_SOURCELESS_DEPTH = 1 << 30
#: Ranks up to this one (ID, TYPE, CONSTANT, LENGTH, DICT_KEYS) are plain Python compares.
_CHEAP_RANK = 4


def _order(item: tuple[int, Guard]) -> tuple[int, int, int, int]:
    seq, guard = item
    depth = guard.source.depth if guard.source is not None else _SOURCELESS_DEPTH
    cost = 0 if guard.rank <= _CHEAP_RANK else guard.rank
    return (cost, depth, guard.rank, seq)


def check_order(items: list[tuple[int, Guard]]) -> list[Guard]:
    """Cheap guards (any depth) before tensor guards before TLS, global state and shapes;
    within those, shallow sources first; then every guard on a base is moved before the
    guards on values read through it, so a base's type is pinned before it is read through."""
    ordered = [g for _, g in sorted(items, key=_order)]
    on_source: dict[Source, list[Guard]] = {}
    for guard in ordered:
        if guard.source is not None:
            on_source.setdefault(guard.source, []).append(guard)
    out: list[Guard] = []
    placed: set[int] = set()

    def place(guard: Guard) -> None:
        if id(guard) in placed:
            return
        placed.add(id(guard))
        if guard.source is not None:
            for base in guard.source.chain()[:-1]:
                for base_guard in on_source.get(base, []):
                    place(base_guard)
        out.append(guard)

    for guard in ordered:
        place(guard)
    return out


class GuardSet:
    """The guards of one compiled frame.

    Methods are named for the guard kinds.  Adding a guard equal to one already present is a
    no-op; two TENSOR_MATCH on one source (static and dynamic) keep the stricter; two
    contradictory guards on one value (two different constants, ...) raise GuardError.

    ``guards`` lists them in check order (see ``check_order``): the cheap Python compares
    (ID, TYPE, CONSTANT, LENGTH, DICT_KEYS) first, as flags and lengths are what most often
    tells cache entries apart; then TENSOR_MATCH, DISPATCH_TLS, GLOBAL_STATE and SHAPE; and
    always a base's guards before guards on values read through it, so ``type(L['self'])``
    is known before ``L['self'].linear`` is read.
    """

    def __init__(self) -> None:
        self._guards: dict[tuple[object, ...], tuple[int, Guard]] = {}
        self._seq = 0

    def add(self, guard: Guard) -> None:
        """Add a guard record (the kind methods build and add them for you)."""
        key = guard.merge_key()
        old = self._guards.get(key)
        if old is None:
            self._guards[key] = (self._seq, guard)
            self._seq += 1
            log.debug("guard added: %s", guard.text())
        else:
            self._guards[key] = (old[0], old[1].merge(guard))

    def update(self, other: GuardSet) -> None:
        """Add every guard of ``other`` (e.g. from an inlined call)."""
        for guard in other.guards:
            self.add(guard)

    # -- the guard kinds ------------------------------------------------------------------

    def TENSOR_MATCH(
        self, source: Source, tensor: torch.Tensor, *, dynamic_dims: Collection[int] = ()
    ) -> None:
        """Guard class, dtype, device, requires_grad, dispatch keys, ndim, sizes and strides.

        Sizes in ``dynamic_dims`` are only checked for ``>= 2``; strides follow the rule in
        ``guards.tensor_spec``.  Also adds the DISPATCH_TLS guard (once per set).
        """
        if not isinstance(tensor, torch.Tensor):
            raise UnsupportedGuardValue(f"TENSOR_MATCH on a {type(tensor).__name__}")
        with torch._C.DisableTorchFunctionSubclass():  # as tensor_spec reads it
            ndim = tensor.dim()
        bad = [d for d in dynamic_dims if not -ndim <= d < ndim]
        if bad:
            raise GuardError(
                f"dynamic dims {bad} out of range for a {ndim}-d tensor at {source.name()}"
            )
        self.add(TensorMatch(source, tensor_spec(tensor, dynamic_dims)))
        if ("DISPATCH_TLS", None) not in self._guards:
            self.add(DispatchTls.capture())

    def TYPE_MATCH(self, source: Source, value: object) -> None:
        """Guard ``type(value) is type(<source>)``."""
        self.add(TypeMatch(source, type(value)))

    def ID_MATCH(self, source: Source, value: object) -> None:
        """Guard that ``<source>`` is ``value`` itself (see IdMatch for the reference policy)."""
        self.add(IdMatch.of(source, value))

    def CONSTANT_MATCH(self, source: Source, value: object) -> None:
        """Guard type and value of a constant (None, bool, int, float, complex, str, bytes, enum,
        torch.dtype, torch.device, tuples of these)."""
        self.add(ConstantMatch.of(source, value))

    def LENGTH(self, source: Source, value: object) -> None:
        """Guard type and ``len`` of a list, tuple or dict."""
        if not isinstance(value, list | tuple | dict):
            raise UnsupportedGuardValue(f"LENGTH on a {type(value).__name__}")
        self.add(Length(source, type(value), len(value)))

    def DICT_KEYS(self, source: Source, value: object) -> None:
        """Guard type and exact key order of a dict (values are not guarded)."""
        if not isinstance(value, dict):
            raise UnsupportedGuardValue(f"DICT_KEYS on a {type(value).__name__}")
        keys = tuple(value)
        try:
            hash(keys)
        except TypeError as exc:  # pragma: no cover - dict keys are hashable by definition
            raise UnsupportedGuardValue("DICT_KEYS with unhashable keys") from exc
        self.add(DictKeys(source, type(value), keys))

    def MODULE_PARAMS(
        self, source: Source, module: torch.nn.Module, names: list[str], *, identity: bool = True
    ) -> None:
        """Identity of ``module`` at ``source``, of each submodule and parameter on
        the paths of ``names`` (dotted, as ``named_parameters`` gives them), read through
        ``_modules``/``_parameters``, and each parameter's full TENSOR_MATCH metadata
        (``identity=False``: the metadata only, of whatever module is at ``source``).
        Also adds the DISPATCH_TLS guard (once per set)."""
        self.add(module_params(source, module, names, identity=identity))
        if ("DISPATCH_TLS", None) not in self._guards:
            self.add(DispatchTls.capture())

    def MODULE_CALLS(
        self, source: Source, calls: Sequence[tuple[str, type, object | None]]
    ) -> None:
        """The submodules a trace called under the ``_modules`` dict at ``source``, as
        ``(key, class, the class forward inlined or None)``: each still of that class, with
        no forward/backward (pre-)hooks, not shadowing ``forward`` on the instance (when the
        class forward was inlined), and each class's ``forward`` still that function.  Two on
        one dict merge into the union of their keys."""
        self.add(module_calls(source, calls))

    def GLOBAL_STATE(self) -> None:
        """Capture grad mode, default dtype, deterministic algorithms, autocast and the
        torch-function / torch-dispatch mode counts now."""
        self.add(GlobalState(None, capture_global_state()))

    def SHAPE(
        self,
        predicate: str,
        description: str,
        *,
        label: str = "SHAPE",
        operands: Mapping[str, Source] | None = None,
    ) -> None:
        """A Python boolean expression that must hold, over its ``operands`` (name -> Source,
        read as every source is read), builtins, and ``L``/``G`` (``label``: how the log names
        it, PREDICATE for a condition that is not about sizes)."""
        self.add(Shape.of(predicate, description, label, operands))

    # -- views ----------------------------------------------------------------------------

    @property
    def guards(self) -> list[Guard]:
        """All guards, in check order."""
        return check_order(list(self._guards.values()))

    def sources(self) -> list[Source]:
        """Every source a guard reads, bases included, each once, bases first."""
        seen: dict[Source, None] = {}
        for guard in self.guards:
            if guard.source is not None:
                for s in guard.source.chain():
                    seen.setdefault(s, None)
        return list(seen)

    def add_base_guards(self, f_locals: dict[str, object], f_globals: dict[str, Any]) -> None:
        """TYPE_MATCH every base that a guarded source is read through and no guard pins yet.

        Reading ``L['self'].linear.weight`` runs ``type(L['self'])``'s attribute lookup; once
        ``type(L['self'])`` and ``type(L['self'].linear)`` are guarded, a later call with an
        object of another class fails at its TYPE_MATCH instead of running foreign code.
        ``f_locals``/``f_globals`` are the frame values the guards were built from.
        """
        pinned = {
            g.source
            for g in self.guards
            if isinstance(g, TypeMatch | IdMatch | ConstantMatch | Length | DictKeys | TensorMatch)
        }
        for source in self.sources():
            if source in pinned or not self._is_base(source):
                continue
            self.add(TypeMatch(source, type(source.resolve(f_locals, f_globals))))

    def _is_base(self, source: Source) -> bool:
        return any(
            g.source is not None and g.source != source and source in g.source.chain()
            for _, g in self._guards.values()
        )

    def __len__(self) -> int:
        return len(self._guards)

    def __iter__(self) -> Iterator[Guard]:
        return iter(self.guards)

    def __repr__(self) -> str:
        return f"GuardSet({len(self)} guards)"
