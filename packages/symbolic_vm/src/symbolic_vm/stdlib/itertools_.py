"""``itertools`` as Python the VM inlines (stdlib.polyfill): each function consumes its inputs
and calls the given callables when and as often as the C one does. Generator polyfills run
lazily, as the real iterators; ``product``/``combinations``/``permutations`` read their inputs
whole when called, as CPython's do. ``count`` and ``repeat`` without a bound are infinite:
reading them is fine while something else bounds the loop (``zip``, ``islice``)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported
from symbolic_vm.stdlib.polyfill import polyfill, python_function
from symbolic_vm.values import (
    ConstVar,
    GeneratorVar,
    ListBox,
    ListVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

@polyfill(itertools.chain)
def chain(*iterables: Iterable[Any]) -> Iterator[Any]:
    for iterable in iterables:
        for value in iterable:  # noqa: UP028 (one loop the VM resumes, like chain's)
            yield value


@polyfill(itertools.chain.from_iterable)
def chain_from_iterable(iterables: Iterable[Iterable[Any]]) -> Iterator[Any]:
    for iterable in iterables:
        for value in iterable:  # noqa: UP028 (one loop the VM resumes, like chain's)
            yield value


@polyfill(itertools.product)
def product(*iterables: Iterable[Any], repeat: int = 1) -> Iterator[tuple[Any, ...]]:
    if repeat < 0:
        raise ValueError("repeat argument cannot be negative")
    pools = [tuple(pool) for pool in iterables] * repeat
    rows: list[tuple[Any, ...]] = [()]
    for pool in pools:
        rows = [(*row, value) for row in rows for value in pool]
    return iter(rows)


@polyfill(itertools.permutations)
def permutations(iterable: Iterable[Any], r: int | None = None) -> Iterator[tuple[Any, ...]]:
    pool = tuple(iterable)
    size = len(pool) if r is None else r
    rows = []
    for indices in _index_permutations(len(pool), size):
        rows.append(tuple(pool[i] for i in indices))
    return iter(rows)


def _index_permutations(n: int, r: int) -> list[tuple[int, ...]]:
    if r > n or r < 0:
        return []
    found: list[tuple[int, ...]] = [()]
    for _ in range(r):
        found = [(*row, i) for row in found for i in range(n) if i not in row]
    return found


@polyfill(itertools.combinations)
def combinations(iterable: Iterable[Any], r: int) -> Iterator[tuple[Any, ...]]:
    pool = tuple(iterable)
    if r < 0:
        raise ValueError("r must be non-negative")
    found: list[tuple[int, ...]] = [()]
    for _ in range(r):
        found = [(*row, i) for row in found for i in range(row[-1] + 1 if row else 0, len(pool))]
    return iter([tuple(pool[i] for i in row) for row in found])


@polyfill(itertools.accumulate)
def accumulate(
    iterable: Iterable[Any], func: Callable[[Any, Any], Any] | None = None, *,
    initial: Any = None,
) -> Iterator[Any]:
    total = initial
    started = initial is not None
    if started:
        yield total
    for value in iterable:
        if not started:
            total = value
            started = True
        elif func is None:
            total = total + value
        else:
            total = func(total, value)
        yield total


@polyfill(itertools.islice)
def islice(iterable: Iterable[Any], *args: Any) -> Iterator[Any]:
    bounds = slice(*args)
    start = 0 if bounds.start is None else operator.index(bounds.start)
    stop = None if bounds.stop is None else operator.index(bounds.stop)
    step = 1 if bounds.step is None else operator.index(bounds.step)
    if start < 0 or (stop is not None and stop < 0):
        raise ValueError(
            "Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize."
        )
    if step <= 0:
        raise ValueError("Step for islice() must be a positive integer or None.")
    return _islice(iter(iterable), start, stop, step)


def _islice(it: Iterator[Any], wanted: int, stop: int | None, step: int) -> Iterator[Any]:
    # CPython's loop: skip to the next wanted index, stop at ``stop``, never read past it.
    seen = 0
    while True:
        while seen < wanted:
            for _ in it:
                break
            else:
                return
            seen += 1
        if stop is not None and seen >= stop:
            return
        for item in it:  # noqa: B007 (read one item; it is yielded below)
            break
        else:
            return
        seen += 1
        wanted += step
        if stop is not None and wanted > stop:
            wanted = stop
        yield item


@polyfill(itertools.zip_longest)
def zip_longest(*iterables: Iterable[Any], fillvalue: Any = None) -> Iterator[tuple[Any, ...]]:
    iterators = [iter(it) for it in iterables]
    live = len(iterators)
    if not live:
        return
    done = [False] * len(iterators)
    while True:
        row = []
        for i, it in enumerate(iterators):
            if done[i]:
                row.append(fillvalue)
                continue
            for value in it:
                row.append(value)
                break
            else:
                done[i] = True
                live -= 1
                if not live:
                    return
                row.append(fillvalue)
        yield tuple(row)


@polyfill(itertools.repeat)
def repeat(value: Any, times: int | None = None) -> Iterator[Any]:
    if times is None:
        while True:
            yield value
    for _ in range(times):
        yield value


@polyfill(itertools.count)
def count(start: Any = 0, step: Any = 1) -> Iterator[Any]:
    value = start
    while True:
        yield value
        value = value + step


@polyfill(itertools.cycle)
def cycle(iterable: Iterable[Any]) -> Iterator[Any]:
    saved = []
    for value in iterable:
        yield value
        saved.append(value)
    while saved:
        for value in saved:
            yield value


@polyfill(itertools.starmap)
def starmap(func: Callable[..., Any], iterable: Iterable[Any]) -> Iterator[Any]:
    for args in iterable:
        yield func(*args)


@polyfill(itertools.pairwise)
def pairwise(iterable: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    started = False
    previous = None
    for value in iterable:
        if started:
            yield previous, value
        previous = value
        started = True


@polyfill(itertools.takewhile)
def takewhile(predicate: Callable[[Any], Any], iterable: Iterable[Any]) -> Iterator[Any]:
    for value in iterable:
        if not predicate(value):
            return
        yield value


@polyfill(itertools.dropwhile)
def dropwhile(predicate: Callable[[Any], Any], iterable: Iterable[Any]) -> Iterator[Any]:
    dropping = True
    for value in iterable:
        if dropping and predicate(value):
            continue
        dropping = False
        yield value


@polyfill(itertools.filterfalse)
def filterfalse(predicate: Callable[[Any], Any] | None, iterable: Iterable[Any]) -> Iterator[Any]:
    for value in iterable:
        if not (value if predicate is None else predicate(value)):
            yield value


@polyfill(itertools.compress)
def compress(data: Iterable[Any], selectors: Iterable[Any]) -> Iterator[Any]:
    for value, keep in zip(data, selectors):  # noqa: B905 (stops at the shorter, as compress)
        if keep:
            yield value


@implements(itertools.groupby)
def _groupby(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Groups worked out when called, which is only eager's order where reading the input and
    calling ``key`` have no effects: checked, else Unsupported (a clean break)."""
    out = vm.out
    if len(args) + len(kwargs) > 2 or set(kwargs) - {"iterable", "key"}:
        raise Unsupported("itertools.groupby with unexpected arguments")
    iterable = args[0] if args else kwargs["iterable"]
    key = args[1] if len(args) > 1 else kwargs.get("key", ConstVar(None))
    if isinstance(iterable, GeneratorVar):
        raise Unsupported("itertools.groupby over a generator (read lazily by CPython)")
    marks = (len(out.builder.graph.nodes), len(out.side_effects))
    rows: list[tuple[object, Var, list[Var]]] = []
    for value in ops.iterate(out, iterable):
        found = value if _is_none(key) else vm.call(key, [value], {})
        k = ops.const_value(out, found)
        if rows and rows[-1][0] == k:
            rows[-1][2].append(value)
        else:
            rows.append((k, found, [value]))
    if (len(out.builder.graph.nodes), len(out.side_effects)) != marks:
        raise Unsupported("itertools.groupby whose key function has effects")
    table = ListVar(ListBox([TupleVar((k, ListVar(ListBox(vs)))) for _, k, vs in rows]))
    return vm.call(python_function(_groups), [table], {})


def _is_none(var: Var) -> bool:
    return isinstance(var, ConstVar) and var.value is None


def _groups(rows: list[tuple[Any, list[Any]]]) -> Iterator[tuple[Any, Iterator[Any]]]:
    # CPython hands out one live group at a time: moving on (or reaching the end) empties the
    # groups handed out before.
    current = [-1]
    for index, (k, values) in enumerate(rows):
        current[0] = index
        yield k, _group(current, index, values)
    current[0] = -1


def _group(current: list[int], index: int, values: list[Any]) -> Iterator[Any]:
    for value in values:
        if current[0] != index:
            return
        yield value


@polyfill(itertools.combinations_with_replacement)
def combinations_with_replacement(iterable: Iterable[Any], r: int) -> Iterator[tuple[Any, ...]]:
    pool = tuple(iterable)
    if r < 0:
        raise ValueError("r must be non-negative")
    if not pool and r:
        return iter([])
    found: list[tuple[int, ...]] = [()]
    for _ in range(r):
        found = [(*row, i) for row in found for i in range(row[-1] if row else 0, len(pool))]
    return iter([tuple(pool[i] for i in row) for row in found])
