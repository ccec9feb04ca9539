"""collections inside compiled code (symbolic_vm.stdlib.collections_): namedtuple methods,
OrderedDict (move_to_end, popitem(last=)), defaultdict (its factory on missing keys) and
Counter (update, most_common, missing keys), made in the frame and returned (rebuilt), or read
from outside, where their changes are replayed on the real object after the graph. Each
equals eager (results and arguments), is captured whole, in no more graphs than torch.compile."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import pytest
import torch
from object_model_harness import run_three_ways, same
from stdlib_harness import check_whole

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


Point = collections.namedtuple("Point", "x y", defaults=(0,))


class Span(NamedTuple):
    start: torch.Tensor
    length: int = 1

    def end(self) -> torch.Tensor:
        return self.start + self.length


def _namedtuples(x: torch.Tensor, p: Point) -> Any:
    q = Point(x, 2)._replace(y=3)
    made = Point._make([x * 2, 4])
    span = Span(x)._replace(length=5)
    return (
        q, q._asdict(), made, q._fields, p._replace(x=p.x + 1), p._asdict()["y"],
        span.end(), span._field_defaults, Point(x),
    )


def test_namedtuple_methods_match_eager_in_one_graph() -> None:
    check_whole(_namedtuples, lambda: (torch.arange(3.0), Point(torch.ones(3), 7)))


def _ordered(x: torch.Tensor) -> Any:
    d = collections.OrderedDict(a=x, b=1, c=2)
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    first = d.popitem(last=False)
    d["z"] = x * 2
    last = d.popitem()
    del d["b"]
    return d, first, last, list(d), len(d), "a" in d


def test_an_ordered_dict_made_inside_matches_eager_and_is_rebuilt() -> None:
    runs = check_whole(_ordered, lambda: (torch.arange(3.0),))
    assert type(runs.ours[0]) is collections.OrderedDict


def _defaults(x: torch.Tensor) -> Any:
    groups: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
    groups["a"].append(x)
    groups["a"].append(x + 1)
    groups["b"]
    counts = collections.defaultdict(int, {"seen": 1})
    counts["seen"] += 1
    counts["new"] += 1
    return groups, counts, len(groups), groups.default_factory, sorted(counts)


def test_a_defaultdict_made_inside_calls_its_factory_as_eager() -> None:
    runs = check_whole(_defaults, lambda: (torch.arange(3.0),))
    assert runs.ours[0].default_factory is list


def _counting(x: torch.Tensor) -> Any:
    c = collections.Counter("abca")
    c.update(["b", "b"])
    c["z"] += 1
    top = c.most_common(2)
    return x * top[0][1] + c["missing"], c, top, sorted(c.elements()), c.total()


def test_a_counter_made_inside_matches_eager_in_one_graph() -> None:
    runs = check_whole(_counting, lambda: (torch.arange(3.0),))
    assert type(runs.ours[1]) is collections.Counter


def _read_outside(x: torch.Tensor, od: Any, dd: Any, c: Any) -> Any:
    return (
        od["b"] * x, list(od), len(od), "a" in od, dd["k"][0] * x, bool(dd), c["a"] * x,
        c["absent"], [k for k in c],
    )


def _outside() -> tuple[Any, ...]:
    od = collections.OrderedDict(a=1, b=2)
    od.move_to_end("a")
    return (torch.arange(3.0), od, collections.defaultdict(list, {"k": [3]}),
            collections.Counter("aab"))


def test_mappings_from_outside_are_read_in_one_graph() -> None:
    check_whole(_read_outside, _outside)


def test_a_mapping_from_outside_that_changes_is_recompiled_for() -> None:
    compiled = compile_api.compile(_read_outside, backend="eager")
    args = _outside()
    same(compiled(*args), _read_outside(*args))
    args[1]["b"] = 5
    args[3]["a"] = 9
    same(compiled(*args), _read_outside(*args))


def _change_outside(x: torch.Tensor, od: Any, dd: Any, c: Any) -> Any:
    od["new"] = x
    od.move_to_end("b", last=False)
    popped = od.pop("a")
    dd["missing"].append(x)
    dd["k"].append(4)
    c["a"] += 1
    c.update("zz")
    del c["b"]
    return x + popped, od.get("new"), sorted(dd), c.most_common(1), dd.get("none", 0)


def test_changing_a_mapping_from_outside_is_replayed_in_one_graph() -> None:
    runs = check_whole(_change_outside, _outside)
    for ours, eager in zip(runs.our_args[1:], runs.eager_args[1:], strict=True):
        assert type(ours) is type(eager)
        same(list(ours.items()), list(eager.items()))


def test_a_replayed_mapping_is_guarded_for_the_next_call() -> None:
    compiled = compile_api.compile(_change_outside, backend="eager")
    for _ in range(3):  # the same objects, changed by each call: recompiles, same results
        ours, eager = _outside(), _outside()
        for _ in range(2):
            for args in (ours, eager):  # what each call deletes, put back
                args[1]["a"] = 1
                args[3]["b"] = 1
            same(compiled(*ours), _change_outside(*eager))
            for mine, theirs in zip(ours[1:], eager[1:], strict=True):
                same(list(mine.items()), list(theirs.items()))


def _queue(x: torch.Tensor) -> Any:
    d = collections.deque([1, 2], maxlen=3)
    d.append(3)
    d.appendleft(0)  # full: drops 3 from the right
    d.rotate(1)
    first, last = d.popleft(), d.pop()
    d.extend([x, x * 2])  # drops from the left
    d.extendleft([5])
    d[1] = x + 1
    window = collections.deque(maxlen=2)
    for i in range(4):
        window.append(x * i)
    plain = collections.deque()
    plain.append(x)
    plain.insert(0, 7)
    plain.remove(7)
    consts = collections.deque([5, 6, 5])
    consts.reverse()
    return (x * first + last, d, len(d), d[0], list(window), window.maxlen, plain,
            plain.copy(), bool(collections.deque()), consts.count(5), 6 in consts, consts.index(6))


def test_a_deque_made_inside_matches_eager_and_is_rebuilt() -> None:
    runs = check_whole(_queue, lambda: (torch.arange(3.0),))
    assert type(runs.ours[1]) is collections.deque and runs.ours[1].maxlen == 3


def test_deque_errors_are_eager_errors() -> None:
    def f(x: torch.Tensor) -> Any:
        return collections.deque().pop()

    with pytest.raises(IndexError, match="pop from an empty deque"):
        compile_api.compile(f, backend="eager")(torch.ones(1))


def _deque_outside(x: torch.Tensor, d: Any) -> Any:
    return x * d[0] + len(d), [v for v in d], 2 in d, d[-1], bool(d), d.count(1), d.index(2)


def test_a_deque_from_outside_is_read_in_one_graph_and_changes_recompile() -> None:
    check_whole(_deque_outside, lambda: (torch.ones(2), collections.deque([1, 2, 1])))
    compiled = compile_api.compile(_deque_outside, backend="eager")
    d = collections.deque([3, 2, 1])
    same(compiled(torch.ones(2), d), _deque_outside(torch.ones(2), d))
    d.appendleft(4)
    same(compiled(torch.ones(2), d), _deque_outside(torch.ones(2), d))


def test_changing_a_deque_from_outside_breaks_and_matches_eager() -> None:
    def f(x: torch.Tensor, d: Any) -> Any:
        d.append(x)
        return x * len(d)

    runs = run_three_ways(f, lambda: (torch.ones(2), collections.deque([1])))
    same(runs.ours, runs.eager)
    same(_comparable_deque(runs.our_args[1]), _comparable_deque(runs.eager_args[1]))
    assert runs.our_graphs <= runs.their_graphs


def _comparable_deque(d: Any) -> Any:
    return type(d), list(d)
