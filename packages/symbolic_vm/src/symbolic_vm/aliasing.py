"""Guards on which frame values are the same object.

A trace relies on identity between values read at different sources in two ways: ``a is b``
answered on the real objects, and one list/dict/set reached by two sources tracked as one box
(so a write through one alias is read through the other). Type and value guards do not pin
either: called again with the two arguments swapped for one shared object (or the other way
round), the code would take the other branch or read a stale length. These predicates fail then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from symbolic_vm.guard_api import Source
from symbolic_vm.values import DictVar, ListVar, SetVar, Var

# (expression over the operand names, description, operand name -> Source)
Predicate = tuple[str, str, dict[str, Source]]


def identity_predicate(a: Var, b: Var, same: bool) -> Predicate | None:
    """The guard for a trace that found ``a is b`` to be ``same``: None when one of them has no
    source (a constant of the trace) or both come from one source."""
    if a.source is None or b.source is None or a.source == b.source:
        return None
    op = "is" if same else "is not"
    description = f"the trace relied on {a.source.name()} {op} {b.source.name()}"
    return f"a {op} b", description, {"a": a.source, "b": b.source}


def container_partition(by_source: Mapping[Source, Var]) -> Predicate | None:
    """The guard that the lists/dicts/sets read from the frame alias as they did at capture:
    sources tracked as one box hold one object, and the boxes are distinct objects."""
    groups: dict[int, list[str]] = {}
    operands: dict[str, Source] = {}
    written = False
    for source, var in by_source.items():
        if isinstance(var, (ListVar, DictVar, SetVar)):
            name = f"s{len(operands)}"
            operands[name] = source
            groups.setdefault(id(var.box), []).append(name)
            # a set's trace works on a copy written back at the end: taken as written
            written = written or getattr(var.box, "mutated", True)
    parts = [f"{names[0]} is {other}" for names in groups.values() for other in names[1:]]
    # Distinct containers matter only when one was written (a write read through the other);
    # `a is b` between two of them is identical()'s own guard.
    if written and len(groups) > 1:
        firsts = ", ".join(f"id({names[0]})" for names in groups.values())
        parts.append(f"len({{{firsts}}}) == {len(groups)}")
    if not parts:
        return None
    used = set(re.findall(r"\bs\d+\b", " ".join(parts)))
    return (
        " and ".join(parts),
        "the lists, dicts and sets read alias as at capture",
        {name: source for name, source in operands.items() if name in used},
    )
