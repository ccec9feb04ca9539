"""Row scratch: a value several steps of one C++ row kernel recompute is computed once.

Cheap producers are inlined into every consumer (that keeps pointwise chains out of memory),
so in a row kernel such as layer_norm followed by softmax the normalised value is rebuilt by
each of the later steps. When two steps iterate the same inner space, the first one to compute
such a value also writes it to a stack array of one row, and the later ones read it back from
there (the row is in L1). Pointwise steps are renamed to the reductions' variable names first,
so that the same value is the same expression in every step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .ir import (
    IAdd,
    IDiv,
    IExpr,
    IMod,
    IMul,
    IValue,
    IVar,
    PointwiseNode,
    VCast,
    VExpr,
    VIndex,
    VLoad,
    VOp,
)
from .scheduler import Step
from .symbolic import Size, is_static

__all__ = ["ScratchPlan", "canonical_step", "plan_scratch"]

MAX_ROW = 16384  # elements of one scratch row (on the stack of each thread)
MIN_COST = 3  # operations a value must cost to be worth a scratch row


def _rename_index(x: IExpr, m: dict[str, str], memo: dict[int, object]) -> IExpr:
    if isinstance(x, IVar):
        return IVar(m.get(x.name, x.name))
    if isinstance(x, IAdd):
        return IAdd(tuple(_rename_index(t, m, memo) for t in x.terms))
    if isinstance(x, IMul):
        return IMul(_rename_index(x.a, m, memo), x.c)
    if isinstance(x, IDiv):
        return IDiv(_rename_index(x.a, m, memo), x.c)
    if isinstance(x, IMod):
        return IMod(_rename_index(x.a, m, memo), x.c)
    if isinstance(x, IValue):
        return IValue(_rename(x.v, m, memo), x.bound)
    return x


def _rename(v: VExpr, m: dict[str, str], memo: dict[int, object]) -> VExpr:
    hit = memo.get(id(v))
    if hit is not None:
        return hit  # type: ignore[return-value]
    out: VExpr
    if isinstance(v, VLoad):
        out = VLoad(v.buf, _rename_index(v.index, m, memo), v.dtype)
    elif isinstance(v, VIndex):
        out = VIndex(_rename_index(v.index, m, memo), v.dtype)
    elif isinstance(v, VCast):
        out = VCast(_rename(v.x, m, memo), v.dtype)
    elif isinstance(v, VOp):
        out = VOp(v.op, tuple(_rename(a, m, memo) for a in v.args), v.dtype)
    else:
        out = v
    memo[id(v)] = out
    return out


def canonical_step(step: Step) -> tuple[Step, list[str]]:
    """``step`` with a pointwise node's inner variables named ``r0, r1, ...``, and its names."""
    names = step.var_names
    node = step.node
    if not isinstance(node, PointwiseNode) or not step.inner_sizes:
        return step, names
    mapping = {names[k]: f"r{k - step.split}" for k in range(step.split, len(names))}
    memo: dict[int, object] = {}
    body = _rename(node.body, mapping, memo)
    at = None if node.store_index is None else _rename_index(node.store_index, mapping, memo)
    new_names = names[: step.split] + [mapping[n] for n in names[step.split :]]
    return Step(dataclasses.replace(node, body=body, store_index=at), step.split), new_names


def _index_vars(x: IExpr, out: set[str]) -> None:
    if isinstance(x, IVar):
        out.add(x.name)
    elif isinstance(x, IAdd):
        for t in x.terms:
            _index_vars(t, out)
    elif isinstance(x, IMul | IDiv | IMod):
        _index_vars(x.a, out)


def _inner_ops(v: VExpr, inner: frozenset[str]) -> dict[VExpr, int]:
    """Inner-dependent operations of ``v`` with their cost (distinct operations below them)."""
    found: dict[VExpr, int] = {}
    dep: dict[int, bool] = {}
    cost: dict[int, set[int]] = {}

    def walk(e: VExpr) -> tuple[bool, set[int]]:
        key = id(e)
        if key in dep:
            return dep[key], cost[key]
        ops: set[int] = set()
        d = False
        if isinstance(e, VLoad | VIndex):
            names: set[str] = set()
            _index_vars(e.index, names)
            # an index read from a tensor (gather, embedding) depends on the inner loop only
            # if that read does: x[idx[i], 0] is one value per row
            d = bool(names & inner) or any(walk(iv.v)[0] for iv in _values(e.index))
            ops = {key} if isinstance(e, VLoad) else set()
        elif isinstance(e, VCast):
            d, ops = walk(e.x)
        elif isinstance(e, VOp):
            ops = {key}
            for a in e.args:
                da, oa = walk(a)
                d = d or da
                ops = ops | oa
        dep[key], cost[key] = d, ops
        if d and isinstance(e, VOp) and len(ops) >= MIN_COST:
            found[e] = len(ops)
        return d, ops

    walk(v)
    return found


def _values(x: IExpr) -> list[IValue]:
    if isinstance(x, IValue):
        return [x]
    if isinstance(x, IAdd):
        return [v for t in x.terms for v in _values(t)]
    if isinstance(x, IMul | IDiv | IMod):
        return _values(x.a)
    return []


def _contains(big: VExpr, small: VExpr) -> bool:
    stack = [big]
    while stack:
        e = stack.pop()
        if e == small:
            return True
        if isinstance(e, VOp):
            stack.extend(e.args)
        elif isinstance(e, VCast):
            stack.append(e.x)
    return False


@dataclasses.dataclass
class ScratchPlan:
    """For each emission unit: scratch values it writes and values it reads, by name."""

    writes: list[dict[VExpr, str]]
    reads: list[dict[VExpr, str]]
    arrays: list[tuple[str, VExpr, Size]]  # name, value (for its type), row length


def plan_scratch(units: Sequence[Sequence[tuple[Step, list[str]]]]) -> ScratchPlan:
    """Choose values to keep in scratch rows; ``units`` are the loops in emission order."""
    writes: list[dict[VExpr, str]] = [{} for _ in units]
    reads: list[dict[VExpr, str]] = [{} for _ in units]
    arrays: list[tuple[str, VExpr, Size]] = []
    seen: dict[tuple[object, ...], dict[VExpr, list[int]]] = {}
    costs: dict[VExpr, int] = {}
    shape_of: dict[VExpr, tuple[object, ...]] = {}
    for u, unit in enumerate(units):
        step, names = unit[0]
        # a symbolic row length is checked against MAX_ROW at run time (cpp.py)
        if not step.inner_sizes or (
            is_static(step.inner_numel) and step.inner_numel > MAX_ROW  # type: ignore[operator]
        ):
            continue
        shape = (step.outer_sizes, step.inner_sizes)
        inner = frozenset(names[step.split :])
        table = seen.setdefault(shape, {})
        for s, _ in unit:
            for e, c in _inner_ops(s.node.body, inner).items():
                users = table.setdefault(e, [])
                if not users or users[-1] != u:
                    users.append(u)
                costs[e] = c
                shape_of[e] = shape
    chosen: list[tuple[VExpr, set[int]]] = []
    for table in seen.values():
        shared = [e for e, users in table.items() if len(users) >= 2]
        for e in sorted(shared, key=lambda e: -costs[e]):
            users = table[e]
            # not needed where a chosen value containing it is read back anyway
            if any(set(users) <= c_users and _contains(c, e) for c, c_users in chosen):
                continue
            chosen.append((e, set(users)))
            name = f"scratch{len(arrays)}"  # not s<k>: size symbols are named so
            step0 = units[users[0]][0][0]
            arrays.append((name, e, step0.inner_numel))
            writes[users[0]][e] = name
            for u in users[1:]:
                reads[u][e] = name
    return ScratchPlan(writes, reads, arrays)
