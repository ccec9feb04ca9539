"""State trees: the value guards on an unchanged object graph, checked as one C++ call.

A model's guard set is mostly identity, class and constant guards on objects reached through
instance dicts and dicts from one root (``L['self']._modules['features']._modules['0']
.stride[0] == 2``, hundreds of them).  ``plan_trees`` groups those guards by root; the
generated check asks the extension's ``StateTree`` (csrc/state_tree.cpp) whether every dict,
instance dict and class on those paths still carries the version tag it had when the guards
last passed, and runs the guards themselves only when it says no (then re-arms it).  A
guard is covered only where that tag argument proves it: its path reads instance
attributes, exact-dict entries with str/int keys, tuple items, ``type(x)`` and plain functions
on a class; its kind depends only on the identity and class of the value it reads (ID_MATCH,
TYPE_MATCH, CONSTANT_MATCH: constants are immutable), or on an exact dict's keys or an exact
tuple's or dict's length.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable

import attrs

from guards.guard import Guard
from guards.shape_guard import Shape
from guards.source import AttrSource, GlobalSource, ItemSource, LocalSource, Source, TypeSource
from guards.value_guards import ConstantMatch, DictKeys, IdMatch, Length, TypeMatch

__all__ = ["GLOBALS_ROOT", "STATE_TREES_ENV", "StateTreePlan", "plan_trees", "state_trees_on"]

#: Set to "0" to compile checks without state trees (read each time a check is compiled).
STATE_TREES_ENV = "STRATA_GUARDS_STATE_TREES"

# Step codes of csrc/state_tree.cpp.
ROOT, ATTR, ITEM, TYPE, CLASSATTR = range(5)

#: The root of the tree of global reads (``G``, the frame's globals dict).
GLOBALS_ROOT = "G"

# A tree that would cover fewer guards than this costs more (one more call) than it saves.
_MIN_COVERED = 4


@attrs.frozen
class StateTreePlan:
    """One tree: its root (a LocalSource, or GLOBALS_ROOT), its steps for ``StateTree`` (one
    per node, parents first: ``(parent index, step code, key, exported)``), the guards it
    covers in the order given, and the sources of its exported nodes, in the order a passing
    check returns them (the deepest nodes the other guards read through)."""

    root: LocalSource | str
    steps: tuple[tuple[int, int, object, bool], ...]
    covered: tuple[Guard, ...]
    exports: tuple[Source, ...]


def state_trees_on() -> bool:
    """False when ``STRATA_GUARDS_STATE_TREES=0`` (for measurements and bisection)."""
    return os.environ.get(STATE_TREES_ENV) != "0"


def _covers_kind(guard: Guard) -> bool:
    if isinstance(guard, IdMatch | TypeMatch | ConstantMatch):
        return True
    if isinstance(guard, DictKeys):
        return guard.expected_type is dict
    if isinstance(guard, Length):
        return guard.expected_type in (tuple, dict)
    return False


def _step(source: Source) -> tuple[int, object] | None:
    """(step code, key) of reading ``source`` from its base, None when no tree step reads it."""
    if isinstance(source, AttrSource):
        return (CLASSATTR if isinstance(source.base_source, TypeSource) else ATTR), source.member
    if isinstance(source, ItemSource) and type(source.index) in (str, int):
        return ITEM, source.index
    if isinstance(source, TypeSource):
        return TYPE, None
    if isinstance(source, GlobalSource):
        return ITEM, source.global_name
    return None


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def _steps_fit(source: Source, known: dict[Source, type]) -> bool:
    """False where the class a guard pins on the base of ``source`` shows that StateTree cannot
    record this step (an attribute of a function, an item of a list): such a guard stays out
    of the tree, which would otherwise never arm."""
    base_type = known.get(source.base) if source.base is not None else None
    if base_type is None or isinstance(source.base, TypeSource):
        return True
    if isinstance(source, AttrSource):
        plain = bool(base_type.__flags__ & _HEAPTYPE) and (
            base_type.__getattribute__ is object.__getattribute__  # type: ignore[comparison-overlap]
        )
        return plain or base_type is types.ModuleType
    if isinstance(source, ItemSource):
        return base_type in (dict, tuple)
    return True


def _path(
    source: Source, known: dict[Source, type]
) -> tuple[LocalSource | str, list[Source]] | None:
    """The root and the sources read from it down to ``source``, or None."""
    chain = source.chain()
    head = chain[0]
    if isinstance(head, LocalSource):
        rest = chain[1:]
        root: LocalSource | str = head
    elif isinstance(head, GlobalSource):
        rest = chain
        root = GLOBALS_ROOT
    else:
        return None
    if any(_step(s) is None or not _steps_fit(s, known) for s in rest):
        return None
    return root, rest


def _read_sources(guard: Guard) -> list[Source]:
    """The sources ``guard``'s check reads."""
    out = [guard.source] if guard.source is not None else []
    if isinstance(guard, Shape):
        out += [source for _, source in guard.operands]
    return out


def plan_trees(guards: Iterable[Guard]) -> list[StateTreePlan]:
    """The state trees worth checking for ``guards`` (in check order), roots in order of first
    use; each lists its covered guards in the order given."""
    guards = list(guards)
    pinned: dict[Source, type] = {}  # the class a guard pins on each source
    for guard in guards:
        if isinstance(guard, TypeMatch) and guard.source is not None:
            pinned[guard.source] = guard.expected
        elif isinstance(guard, IdMatch) and guard.source is not None:
            pinned[guard.source] = guard.obj_type
    index: dict[LocalSource | str, dict[Source, int]] = {}  # node -> its index in steps
    steps: dict[LocalSource | str, list[tuple[int, int, object]]] = {}
    covered: dict[LocalSource | str, list[Guard]] = {}
    for guard in guards:
        if guard.source is None or not _covers_kind(guard):
            continue
        path = _path(guard.source, pinned)
        if path is None:
            continue
        root, rest = path
        known = index.setdefault(root, {})
        tree = steps.setdefault(root, [(-1, ROOT, 0)])
        parent = 0
        for source in rest:
            node = known.get(source)
            if node is None:
                step = _step(source)
                assert step is not None
                node = known[source] = len(tree)
                tree.append((parent, step[0], step[1]))
            parent = node
        covered.setdefault(root, []).append(guard)
    kept = [root for root, of in covered.items() if len(of) >= _MIN_COVERED]
    in_trees = {id(g) for root in kept for g in covered[root]}
    # Each other guard reads its sources from the deepest tree node on their paths.
    exported: dict[LocalSource | str, set[int]] = {root: set() for root in kept}
    for guard in guards:
        if id(guard) in in_trees:
            continue
        for source in _read_sources(guard):
            chain = source.chain()
            head = chain[0]
            at: LocalSource | str = GLOBALS_ROOT if isinstance(head, GlobalSource) else ""
            if isinstance(head, LocalSource):
                at = head
            if at not in exported:
                continue
            deepest = max((index[at].get(s, 0) for s in chain), default=0)
            if deepest:
                exported[at].add(deepest)
    plans = []
    for root in kept:
        nodes = {i: s for s, i in index[root].items()}
        plans.append(
            StateTreePlan(
                root,
                tuple(
                    (parent, code, key, i in exported[root])
                    for i, (parent, code, key) in enumerate(steps[root])
                ),
                tuple(covered[root]),
                tuple(nodes[i] for i in sorted(exported[root])),
            )
        )
    return plans
