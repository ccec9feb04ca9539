"""Differential tests (eager as reference) of graph breaks in user context managers and iterators.

Targets: graph breaks inside user context managers (a ``with`` statement as a region, a manager
handed on to the resume function), iterators and generators held in locals as regions, ``.grad``
assignments replayed after the graph, guards built after the backend ran (and sources for the
symbols of an input's fake ``.grad``), and frames under the autograd engine's backward entry.

Every case runs the function eagerly and compiled on equal inputs and compares, per call: the
result or the raised exception (type and message), the order of the log entries the program
appends (``__enter__``/``__exit__`` calls, generator steps, backward calls), everything printed,
the grad mode after the call, and the arguments afterwards (tensor values, ``requires_grad``,
``.grad``; module parameters; plain objects' attributes). Internal errors are not hidden:
``config.suppress_errors`` is off, so a frame that fails to compile fails the test.
"""

from __future__ import annotations

import collections.abc
import contextlib
import copy
import functools
import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import compile_api

LOG: list[object] = []

Args = tuple[Any, ...] | Callable[[], tuple[Any, ...]]


def _snap(v: Any) -> Any:
    """A comparable picture of ``v`` (tensors by value, grad flag and ``.grad``)."""
    if isinstance(v, torch.Tensor):
        grad = v.grad.clone() if v.is_leaf and v.grad is not None else None
        return ("tensor", v.detach().clone(), v.requires_grad, grad)
    if isinstance(v, torch.nn.Module):
        return ("module", [_snap(p) for p in v.parameters()])
    if isinstance(v, list | tuple):
        return (type(v).__name__, [_snap(i) for i in v])
    if hasattr(v, "__dict__") and not isinstance(v, type) and not callable(v):
        state = sorted((k, repr(w)) for k, w in vars(v).items() if not callable(w))
        return ("object", type(v).__name__, state)
    return v


def _assert_same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, tuple) and want and want[0] == "tensor":
        assert isinstance(got, tuple) and got[0] == "tensor", (where, got, want)
        torch.testing.assert_close(got[1], want[1], msg=where)
        assert got[2] == want[2], (where, "requires_grad")
        assert (got[3] is None) == (want[3] is None), (where, ".grad", got[3], want[3])
        if want[3] is not None:
            torch.testing.assert_close(got[3], want[3], msg=f"{where}.grad")
    elif isinstance(want, tuple) and want and want[0] in ("list", "tuple", "module"):
        assert got[0] == want[0] and len(got[1]) == len(want[1]), (where, got, want)
        for k, (g, w) in enumerate(zip(got[1], want[1], strict=True)):
            _assert_same(g, w, f"{where}[{k}]")
    else:
        assert got == want, (where, got, want)


def _observe(fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, Any]:
    """Everything a caller can see of one call of ``fn``."""
    LOG.clear()
    out = io.StringIO()
    mode = torch.is_grad_enabled()
    try:
        with contextlib.redirect_stdout(out):
            try:
                result: Any = ("value", _snap(fn(*args)))
            except Exception as exc:  # noqa: BLE001 - compared as an outcome
                result = ("raised", type(exc).__name__, str(exc))
        return {
            "result": result, "log": list(LOG), "stdout": out.getvalue(),
            "grad_mode": torch.is_grad_enabled(), "args": _snap(list(args)),
        }
    finally:
        torch.set_grad_enabled(mode)


def assert_like_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str = "eager",
    dynamic: bool | None = None,
) -> None:
    """Each call of ``fn`` compiled (one compiled function over all calls, so later calls run
    cached code or recompile) is indistinguishable from the eager call on equal inputs."""
    compile_api.config.suppress_errors = False
    compiled = compile_api.compile(fn, backend=backend, dynamic=dynamic)
    for k, args in enumerate(calls):
        if callable(args):
            want, got = _observe(fn, args()), _observe(compiled, args())
        else:
            want = _observe(fn, copy.deepcopy(args))
            got = _observe(compiled, copy.deepcopy(args))
        assert got["result"][0] == want["result"][0], (k, got["result"], want["result"])
        if want["result"][0] == "value":
            _assert_same(got["result"][1], want["result"][1], f"call {k}: result")
        else:
            assert got["result"] == want["result"], (k, got["result"], want["result"])
        for key in ("log", "stdout", "grad_mode"):
            assert got[key] == want[key], (k, key, got[key], want[key])
        _assert_same(got["args"], want["args"], f"call {k}: args")


def graph_count(fn: Callable[..., Any], args: tuple[Any, ...]) -> int:
    compile_api.reset()
    with contextlib.redirect_stdout(io.StringIO()):
        return int(compile_api.explain(fn)(*args).graph_count)


# -- user managers ------------------------------------------------------------------------------


class Tracked:
    """A never-suppressing user manager (handed on at a break): logs its calls and depth."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.depth = 0

    def __enter__(self) -> Tracked:
        self.depth += 1
        LOG.append(("enter", self.name, self.depth, torch.is_grad_enabled()))
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        LOG.append(("exit", self.name, kind.__name__ if kind else None, self.depth))
        self.depth -= 1


class SuppressesKeyError:
    """Suppresses a KeyError only (so some calls suppress, others propagate): a region."""

    def __enter__(self) -> SuppressesKeyError:
        LOG.append("enter")
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        LOG.append(("exit", kind.__name__ if kind else None))
        return kind is KeyError


class SuppressesAll(Tracked):
    """A subclass of a handed-on manager whose ``__exit__`` suppresses everything."""

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        LOG.append(("suppressing exit", kind.__name__ if kind else None))
        return True


class ExitRaises:
    def __enter__(self) -> None:
        LOG.append("enter")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        LOG.append(("exit", kind.__name__ if kind else None))
        raise RuntimeError("raised by __exit__")


class EnterGivesTensor:
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __enter__(self) -> torch.Tensor:
        LOG.append("enter")
        return self.x * 2

    def __exit__(self, *exc: object) -> None:
        LOG.append("exit")


@contextlib.contextmanager
def catching_generator_manager(tag: int) -> Iterator[int]:
    LOG.append(("cm enter", tag))
    try:
        yield tag * 2
    except KeyError:
        LOG.append("cm caught")
    finally:
        LOG.append(("cm exit", tag))


def untraceable_raise(v: torch.Tensor) -> None:
    print("raising", tuple(v.shape))
    raise KeyError("from the broken call")


def untraceable_set(m: Tracked) -> None:
    print("setting")
    m.depth = 7


def printing_helper(y: torch.Tensor) -> torch.Tensor:
    print("helper", tuple(y.shape))
    return y * 3


def nested_managers(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with Tracked("outer"):
        y = y * 2
        with Tracked("inner"):
            y = y - 3
            print("inner")
            y = y * y
        y = y + 1
    return y.sin()


def nested_managers_raise_at_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with Tracked("outer"):
        with Tracked("inner"):
            y = y * 2
            untraceable_raise(y)
            y = y * y
    return y


def nested_managers_raise_after_break(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x + 1
    with Tracked("outer"), Tracked("inner"):
        print("inner")
        if n > 1:
            raise ValueError(n)
        y = y * 2
    return y


def suppresses_on_some_calls(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with SuppressesKeyError():
        y = y * 2
        print("inside", k)
        if k == 1:
            raise KeyError(k)
        if k == 2:
            raise ValueError(k)
        y = y + 10
    return y * 3


def suppressed_raise_at_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with SuppressesKeyError():
        y = y * 2
        untraceable_raise(y)
        y = y + 10
    return y * 3


def handed_on_raise_at_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    m = Tracked("local")
    with m:
        y = y * 2
        untraceable_raise(y)
        y = y + 10
    return y * 3


def return_inside_with(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with Tracked("ret"):
        y = y * 2
        print("returning")
        return y - 1


def break_continue_out_of_with(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x + 1
    for i in range(n):
        with Tracked("loop"):
            y = y * 2
            print("iteration", i)
            if i == 1:
                continue
            if i == 3:
                break
            y = y + i
    return y


def return_out_of_with_in_while(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    y = x
    i = 0
    while True:
        with Tracked("while"):
            y = y + 1
            print(i)
            i += 1
            if i == 3:
                return y, i


def generator_manager_block(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with catching_generator_manager(3) as t:
        y = y * t
        print("generator manager", t)
        if k:
            raise KeyError(k)
        y = y + 1
    return y


class ModuleWithManager(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.cm = Tracked("on self")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        with self.cm:
            y = y.relu()
            print("module", self.cm.depth)
            y = y * 2
        return y.sum()


torch.manual_seed(0)
MODULE = ModuleWithManager()
REENTRANT = Tracked("reentrant")


def manager_on_self(x: torch.Tensor) -> torch.Tensor:
    return MODULE(x)


def reentrant_manager(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with REENTRANT:
        with REENTRANT:
            y = y * 2
            print("depth", REENTRANT.depth)
            y = y + REENTRANT.depth
        y = y * REENTRANT.depth
    return y


def as_target_read_after_break(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    with Tracked("as") as m:
        y = x * m.depth
        print("as")
        y = y + m.depth
    return y, m.depth


def no_grad_around_manager(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    y = x * 2
    with torch.no_grad(), Tracked("no_grad"):
        z = y * 3
        print("grad", torch.is_grad_enabled())
        z = z + 1
    return z, y, torch.is_grad_enabled()


def enable_grad_inside_manager(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    with Tracked("enable"):
        with torch.enable_grad():
            z = y * 3
            print("grad", torch.is_grad_enabled())
            z = z + 1
        w = z * 2
    return w


def exit_raises_after_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with ExitRaises():
        y = y * 2
        print("exit will raise")
        y = y + 1
    return y


def exit_raises_over_broken_call(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    with ExitRaises():
        y = y * 2
        untraceable_raise(y)
    return y


def broken_call_mutates_manager(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    m = Tracked("mutated")
    with m:
        m.depth = 3
        y = x * m.depth
        untraceable_set(m)
        y = y + m.depth
    return y, m.depth


def manager_argument(x: torch.Tensor, m: Tracked, k: int) -> torch.Tensor:
    y = x + 1
    with m:
        y = y * 2
        print("argument manager")
        if k:
            raise KeyError(k)
        y = y + 1
    return y


def manager_argument_raise_at_break(x: torch.Tensor, m: Tracked) -> torch.Tensor:
    y = x + 1
    with m:
        y = y * 2
        untraceable_raise(y)
    return y


def enter_returns_a_tensor(x: torch.Tensor) -> torch.Tensor:
    with EnterGivesTensor(x) as t:
        y = t + 1
        print("tensor from __enter__")
        y = y * t
    return y


def break_in_callee_inside_with(x: torch.Tensor) -> torch.Tensor:
    with Tracked("callee"):
        y = printing_helper(x + 1)
        y = y - 1
    return y


def dynamic_break_in_manager(x: torch.Tensor) -> torch.Tensor:
    y = x.sum(0) * x.shape[0]
    with Tracked("dynamic"):
        z = y[1:] * 2
        print("shape", tuple(x.shape))
        z = z + x.shape[0]
    return z


def specialised_slice_in_resume(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    with Tracked("slice"):
        print("before the slice")
        z = y[2:].sum(0) * y.shape[0]
    return z


X = torch.randn(4)
SIZES = [(torch.randn(n, 3),) for n in (2, 3, 4, 5)]

MANAGER_CASES: list[tuple[Callable[..., Any], list[Args]]] = [
    (nested_managers, [(X,), (torch.randn(5),)]),
    (nested_managers_raise_at_break, [(X,), (X,)]),
    (nested_managers_raise_after_break, [(X, 1), (X, 2)]),
    (suppresses_on_some_calls, [(X, 0), (X, 1), (X, 2), (torch.randn(6), 1)]),
    (suppressed_raise_at_break, [(X,), (X,)]),
    (handed_on_raise_at_break, [(X,), (X,)]),
    (return_inside_with, [(X,), (torch.randn(2, 3),)]),
    (break_continue_out_of_with, [(X, 5), (X, 2)]),
    (return_out_of_with_in_while, [(X,), (X,)]),
    (generator_manager_block, [(X, 0), (X, 1)]),
    (manager_on_self, [(torch.randn(2, 3),), (torch.randn(5, 3),)]),
    (reentrant_manager, [(X,), (X,)]),
    (as_target_read_after_break, [(X,), (torch.randn(7),)]),
    (exit_raises_after_break, [(X,)]),
    (exit_raises_over_broken_call, [(X,)]),
    (broken_call_mutates_manager, [(X,), (X,)]),
    (enter_returns_a_tensor, [(X,), (torch.randn(3),)]),
    (break_in_callee_inside_with, [(X,), (X,)]),
    # A handed-on manager's class changes between calls to one whose __exit__ suppresses
    # (guards must not reuse the handed-on code), and back to a fresh never-suppressing one.
    (manager_argument, [
        (X, Tracked("a"), 0), (X, SuppressesAll("s"), 1), (X, Tracked("b"), 1),
    ]),
    (manager_argument_raise_at_break, [
        (X, Tracked("a")), (X, SuppressesAll("s")), (X, Tracked("b")),
    ]),
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(
    ("fn", "calls"), MANAGER_CASES, ids=[fn.__name__ for fn, _ in MANAGER_CASES]
)
def test_a_break_inside_a_user_manager_is_indistinguishable_from_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str
) -> None:
    assert_like_eager(fn, calls, backend=backend)


def test_the_handed_on_cases_really_compile_inside_the_block() -> None:
    # Not vacuous: the frames above compile (two graphs each, the block's ops in them).
    assert graph_count(nested_managers, (X,)) == 2
    assert graph_count(reentrant_manager, (X,)) == 2
    assert graph_count(manager_on_self, (torch.randn(2, 3),)) >= 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_user_managers_with_grad_mode_blocks_keep_eagers_grad_mode(backend: str) -> None:
    x = torch.randn(4, requires_grad=True)
    assert_like_eager(no_grad_around_manager, [(x,), (x,)], backend=backend)
    with torch.no_grad():
        assert_like_eager(enable_grad_inside_manager, [(x,), (x,)], backend=backend)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_breaks_in_user_managers_with_changing_sizes_match_eager(
    backend: str, dynamic: bool | None
) -> None:
    # dynamic=None: a recompile for the second size, then automatic dynamic shapes.
    assert_like_eager(dynamic_break_in_manager, list(SIZES), backend=backend, dynamic=dynamic)
    compile_api.reset()
    assert_like_eager(specialised_slice_in_resume, list(SIZES), backend=backend, dynamic=dynamic)


def test_a_slice_specialised_by_inductor_after_a_break_in_a_user_manager_is_guarded() -> None:
    # Guards built after the backend ran, in a resume function inside a handed-on block: y[2:]
    # at size 2 is empty, at 3..5 is not.
    assert_like_eager(specialised_slice_in_resume, list(SIZES), backend="inductor", dynamic=True)


def test_fullgraph_names_the_break_inside_a_user_manager() -> None:
    compiled = compile_api.compile(nested_managers, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.Unsupported) as info:
        compiled(X)
    line = next(
        n for n, text in enumerate(open(__file__).read().splitlines(), 1)
        if text.strip() == 'print("inner")'
    )
    assert info.value.filename == __file__
    assert info.value.lineno == line
    assert f"{__file__}:{line}" in str(info.value)


# -- iterators and generators in locals ---------------------------------------------------------


def logging_generator(xs: list[torch.Tensor]) -> Iterator[torch.Tensor]:
    for v in xs:
        LOG.append(("yield", v.shape[0]))
        yield v * 2
    LOG.append("generator done")


def generator_in_a_local(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x + 1
    g = logging_generator([x, y, x])
    first = next(g)
    print("between")
    second = next(g)
    rest = list(g)
    return a + first + second + rest[0]


def range_iterator_in_a_local(x: torch.Tensor, n: int) -> torch.Tensor:
    a = x * 2
    it = iter(range(n))
    k = next(it)
    print("first", k)
    total = a
    for j in it:
        total = total + j
    return total


def list_iterator_in_a_local(
    xs: list[torch.Tensor],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    it = iter(xs)
    a = next(it) * 2
    print("between")
    b = next(it)
    return a + b, [t.sum() for t in it]


def zip_in_a_local(x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, str]]]:
    pairs = zip([1, 2, 3], "abc", strict=True)
    n, s = next(pairs)
    print(s)
    return x * n, list(pairs)


ITERATOR_CASES: list[tuple[Callable[..., Any], list[Args]]] = [
    (generator_in_a_local, [(torch.randn(3), torch.randn(3))]),
    (range_iterator_in_a_local, [(X, 4), (X, 6)]),
    (list_iterator_in_a_local, [([torch.randn(2) for _ in range(4)],)]),
    (zip_in_a_local, [(X,)]),
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(
    ("fn", "calls"), ITERATOR_CASES, ids=[fn.__name__ for fn, _ in ITERATOR_CASES]
)
def test_a_break_while_an_iterator_is_held_in_a_local_matches_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str
) -> None:
    assert_like_eager(fn, calls, backend=backend)


# -- .grad assignments --------------------------------------------------------------------------


def leaf(n: int, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(n, requires_grad=True)


def grad_assign_read_then_backward(
    x: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    x.grad = g * 2
    h = x.grad + 1
    (x * h).sum().backward()
    return x.grad.clone(), h


def grad_none_then_branch(x: torch.Tensor) -> torch.Tensor:
    x.grad = None
    if x.grad is None:
        return x * 2
    return x * 3


def grad_aliases_a_tensor_changed_later(x: torch.Tensor) -> tuple[bool, torch.Tensor]:
    y = x.detach() * 2
    x.grad = y
    y.add_(1)
    return x.grad is y, y


def grad_is_the_argument(x: torch.Tensor, g: torch.Tensor) -> tuple[bool, torch.Tensor]:
    x.grad = g
    return x.grad is g, x.grad


def grad_of_the_wrong_size(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    x.grad = torch.zeros(7)
    return y


def grad_of_a_non_leaf_input(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x.grad = torch.ones_like(x)
    return x * 2, x.grad


def grad_assigned_then_break(x: torch.Tensor) -> torch.Tensor:
    x.grad = torch.full_like(x, 3.0)
    print("break")
    return x.grad * 2


def grad_assigned_then_changed_in_place(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.zeros_like(x)
    x.grad = g
    x.grad.add_(5)
    return g, x.grad


def grad_scaled_between_backwards(
    p: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    p.grad = None
    (p * x).sum().backward()
    first = p.grad.clone()
    p.grad = p.grad * 0.5
    (p * x).sum().backward()
    return first, p.grad


def retained_grad_of_a_non_leaf(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.retain_grad()
    y.sum().backward()
    return y.grad


def sgd_step(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    for p in m.parameters():
        p.grad = None
    loss = m(x).sum()
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= 0.1 * p.grad
    return loss


def grad_zeroed_for_new_sizes(p: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    p.grad = torch.zeros_like(p)
    loss = (p * x).sum()
    return loss, p.grad + 1


torch.manual_seed(1)
LINEAR = torch.nn.Linear(3, 2)

GRAD_CASES: list[tuple[Callable[..., Any], list[Args]]] = [
    (grad_assign_read_then_backward, [(leaf(3), torch.randn(3)), (leaf(5), torch.randn(5))]),
    (grad_none_then_branch, [(leaf(3),)]),
    (grad_aliases_a_tensor_changed_later, [(leaf(3),)]),
    (grad_is_the_argument, [(leaf(3), torch.randn(3))]),
    (grad_of_the_wrong_size, [(leaf(3),)]),
    (grad_of_a_non_leaf_input, [lambda: (leaf(3, seed=2) * 2,)]),
    (grad_assigned_then_break, [(leaf(3),)]),
    (grad_assigned_then_changed_in_place, [(leaf(3),)]),
    (grad_scaled_between_backwards, [(leaf(3), torch.randn(3)), (leaf(4), torch.randn(4))]),
    (retained_grad_of_a_non_leaf, [(leaf(3),)]),
    (sgd_step, [(LINEAR, torch.randn(2, 3)), (LINEAR, torch.randn(5, 3))]),
    (grad_zeroed_for_new_sizes, [
        lambda n=n: (leaf(n, seed=n), torch.ones(n)) for n in (2, 3, 4)  # type: ignore[misc]
    ]),
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(("fn", "calls"), GRAD_CASES, ids=[fn.__name__ for fn, _ in GRAD_CASES])
def test_grad_assignments_match_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str
) -> None:
    assert_like_eager(fn, calls, backend=backend)


def test_grad_of_new_sizes_under_dynamic_true_matches_eager() -> None:
    calls: list[Args] = [lambda n=n: (leaf(n, seed=n), torch.ones(n)) for n in (2, 3, 4)]
    assert_like_eager(grad_zeroed_for_new_sizes, calls, backend="aot_eager", dynamic=True)


# -- backward frames ----------------------------------------------------------------------------


class PlainSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * g


class LoggingSquare(PlainSquare):
    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        LOG.append("backward")
        print("in backward", tuple(g.shape))
        return 2 * x * g


def plain_custom_function_backward(x: torch.Tensor) -> torch.Tensor | None:
    PlainSquare.apply(x).sum().backward()
    return x.grad


def logging_custom_function_backward(x: torch.Tensor) -> torch.Tensor | None:
    LoggingSquare.apply(x).sum().backward()
    return x.grad


def tensor_hook_in_backward(x: torch.Tensor) -> torch.Tensor | None:
    x.register_hook(lambda g: g * 3)
    (x * x).sum().backward()
    return x.grad


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", [plain_custom_function_backward, tensor_hook_in_backward])
def test_backward_inside_a_compiled_function_matches_eager(
    fn: Callable[..., Any], backend: str
) -> None:
    assert_like_eager(fn, [lambda: (leaf(4, seed=3),)] * 2, backend=backend)


def test_a_logging_custom_function_backward_runs_each_call_under_the_eager_backend() -> None:
    assert_like_eager(logging_custom_function_backward, [lambda: (leaf(4, seed=3),)] * 2)


# -- more managers: stdlib and torch managers, object kinds, mixed and nested ----------------------


class Slotted:
    __slots__ = ("depth",)

    def __init__(self) -> None:
        self.depth = 0

    def __enter__(self) -> Slotted:
        self.depth += 1
        LOG.append(("enter", self.depth))
        return self

    def __exit__(self, *exc: object) -> None:
        LOG.append(("exit", self.depth))
        self.depth -= 1


class HoldsTensor:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.count = 0

    def __enter__(self) -> HoldsTensor:
        self.t = self.t * 2
        self.count += 1
        return self

    def __exit__(self, *exc: object) -> None:
        LOG.append(("exit", self.count, round(float(self.t.sum()), 4)))


class PrintingExit(Tracked):
    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        print("exit prints", kind)
        LOG.append(("printing exit", kind.__name__ if kind else None))


class SeesExcInfo(Tracked):
    def __exit__(self, kind: type[BaseException] | None, value: object, tb: object) -> None:
        import sys

        current = sys.exc_info()[0]
        seen = (kind and kind.__name__, str(value), tb is not None)
        LOG.append((*seen, current and current.__name__))


def slotted_manager(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    with Slotted() as m:
        y = x * m.depth
        print("slotted", m.depth)
        y = y + 1
    return y, m.depth


def manager_holding_a_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with HoldsTensor(x) as m:
        y = m.t + 1
        print("holds", m.count)
        y = y * m.t
    return y, m.t


def printing_exit(x: torch.Tensor, k: int) -> torch.Tensor:
    with PrintingExit("p"):
        y = x * 2
        print("body")
        if k:
            raise KeyError(k)
        y = y + 1
    return y


def exc_info_kind(x: torch.Tensor) -> tuple[torch.Tensor, object]:
    import sys

    return x + 1, sys.exc_info()[0]


def test_sys_exc_info_answers_the_exception_the_caller_handles_as_eager() -> None:
    # Outside the traced code's except blocks sys.exc_info() is the caller's: None normally
    # (folded, guarded), the handled exception when called from an except block or an
    # __exit__ during one (then the call runs for real).
    compile_api.config.suppress_errors = False
    compiled = compile_api.compile(exc_info_kind, backend="eager")

    def calls(fn: Callable[..., Any]) -> list[tuple[torch.Tensor, object]]:
        out = [fn(X)]
        try:
            raise KeyError("handled")
        except KeyError:
            out.append(fn(X))
        out.append(fn(X))
        return out

    want, got = calls(exc_info_kind), calls(compiled)
    assert [kind for _, kind in got] == [kind for _, kind in want] == [None, KeyError, None]
    for (want_t, _), (got_t, _) in zip(want, got, strict=True):
        assert torch.equal(got_t, want_t)


def exc_info_in_exit_at_break(x: torch.Tensor) -> torch.Tensor:
    with SeesExcInfo("e"):
        y = x + 1
        untraceable_raise(y)
    return y


def exc_info_in_exit_after_break(x: torch.Tensor) -> torch.Tensor:
    with SeesExcInfo("e"):
        y = x + 1
        print("then raise")
        raise ValueError("later")
    return y


def handed_on_outside_a_region(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with Tracked("outer"):
        y = y * 2
        with SuppressesKeyError():
            print("mixed", k)
            if k:
                raise KeyError(k)
            y = y + 1
        y = y * 3
    return y


def region_outside_a_handed_on(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with SuppressesKeyError():
        y = y * 2
        with Tracked("inner"):
            print("mixed", k)
            if k:
                raise KeyError(k)
            y = y + 1
        y = y * 3
    return y


def try_inside_a_handed_on_block(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with Tracked("try"):
        try:
            print("try", k)
            if k:
                raise ValueError(k)
        except ValueError:
            y = y * 5
        y = y + 1
    return y


def loop_then_a_second_break(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x + 1
    with Tracked("two") as m:
        y = y * 2
        print("one")
        for i in range(n):
            y = y + i
        print("two", m.depth)
        y = y * m.depth
    return y


def generator_inside_a_handed_on_block(x: torch.Tensor) -> torch.Tensor:
    with Tracked("gen"):
        g = logging_generator([x, x + 1])
        a = next(g)
        print("mid")
        b = next(g)
    return a + b


def stdlib_suppress(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x + 1
    with contextlib.suppress(KeyError):
        y = y * 2
        print("suppress", k)
        if k:
            raise KeyError(k)
        y = y + 1
    return y


def stdlib_exit_stack(x: torch.Tensor) -> torch.Tensor:
    with contextlib.ExitStack() as stack:
        stack.enter_context(Tracked("stack"))
        stack.callback(LOG.append, "callback")
        y = x * 2
        print("stack")
        y = y + 1
    return y


def stdlib_nullcontext(x: torch.Tensor) -> torch.Tensor:
    with contextlib.nullcontext(x * 2) as t:
        print("null")
        y = t + 1
    return y


def torch_fork_rng(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(5)
        a = torch.rand(3)
        print("forked")
        b = torch.rand(3)
    return a, b, torch.rand(3), x


def torch_default_device(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.device("cpu"):
        a = torch.ones(3)
        print("device")
        b = torch.zeros(2)
    return a, b, x


def set_grad_enabled_block(x: torch.Tensor) -> tuple[Any, ...]:
    with torch.set_grad_enabled(False):
        y = x * 2
        print("grad", torch.is_grad_enabled())
        z = y * x
    return y, z, torch.is_grad_enabled()


MORE_CASES: list[tuple[Callable[..., Any], list[Args]]] = [
    (slotted_manager, [(X,), (X,)]),
    (manager_holding_a_tensor, [(X,), (torch.randn(2),)]),
    (printing_exit, [(X, 0), (X, 1)]),
    (exc_info_in_exit_at_break, [(X,)]),
    (exc_info_in_exit_after_break, [(X,)]),
    (handed_on_outside_a_region, [(X, 0), (X, 1)]),
    (region_outside_a_handed_on, [(X, 0), (X, 1)]),
    (try_inside_a_handed_on_block, [(X, 0), (X, 1)]),
    (loop_then_a_second_break, [(X, 3), (X, 0)]),
    (generator_inside_a_handed_on_block, [(X,), (X,)]),
    (stdlib_suppress, [(X, 0), (X, 1)]),
    (stdlib_exit_stack, [(X,)]),
    (stdlib_nullcontext, [(X,), (X,)]),
    (torch_fork_rng, [(X,), (X,)]),
    (torch_default_device, [(X,)]),
    (set_grad_enabled_block, [(leaf(3),), (leaf(3),)]),
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(("fn", "calls"), MORE_CASES, ids=[fn.__name__ for fn, _ in MORE_CASES])
def test_more_managers_around_a_break_match_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str
) -> None:
    assert_like_eager(fn, calls, backend=backend)


def slice_by_an_int(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[n:].sum(0) * n + x.shape[0]


def cat_of_slices(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[1:], y[:1]]) * x.shape[0]


def split_in_twos(x: torch.Tensor) -> torch.Tensor:
    a, b = x.split(2)
    return a.sum() + b.sum() * x.shape[0]


def grad_and_a_slice(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    p.grad = torch.zeros_like(p)
    return (p[1:] * x[1:]).sum() + p.grad.sum()


def view_by_an_int(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.view(n, -1).sum(1) * n


def chunks_by_an_int(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [c.sum() for c in x.chunk(n)]


SHAPE_CASES: list[tuple[Callable[..., Any], list[Args]]] = [
    (view_by_an_int, [(torch.randn(12), n) for n in (2, 3, 4, 6, 12, 1)]),
    (chunks_by_an_int, [(torch.randn(n), k) for n, k in [(6, 2), (7, 2), (7, 3), (5, 5), (4, 3)]]),
    (slice_by_an_int, [(torch.randn(n, 2), k) for n, k in [(2, 1), (3, 1), (3, 2), (5, 0)]]),
    (cat_of_slices, [(torch.randn(n), torch.randn(m)) for n, m in [(2, 2), (3, 2), (1, 4)]]),
    (split_in_twos, [(torch.randn(n),) for n in (3, 4, 5, 2)]),
    (grad_and_a_slice, [
        lambda n=n: (leaf(n, n), torch.ones(n)) for n in (2, 3, 1, 4)  # type: ignore[misc]
    ]),
]


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(("fn", "calls"), SHAPE_CASES, ids=[fn.__name__ for fn, _ in SHAPE_CASES])
def test_sizes_a_backend_specialises_are_guarded_over_changing_sizes(
    fn: Callable[..., Any], calls: list[Args], backend: str, dynamic: bool | None
) -> None:
    assert_like_eager(fn, calls, backend=backend, dynamic=dynamic)


def read_grad_and_its_strides(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    return x.grad * 2 + x, x.grad.stride()


def sgd_update_from_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x -= 0.1 * x.grad
    return x.sum()


def with_grad_laid_out(n: int, layout: str) -> Callable[[], tuple[torch.Tensor]]:
    """A leaf of n x 3 whose ``.grad`` is contiguous, transposed, offset in its storage or
    expanded (eager accepts any layout of the right size)."""

    def make() -> tuple[torch.Tensor]:
        torch.manual_seed(n)
        x = torch.randn(n, 3, requires_grad=True)
        x.grad = {
            "contiguous": lambda: torch.randn(n, 3),
            "transposed": lambda: torch.randn(3, n).t(),
            "offset": lambda: torch.randn(n + 1, 3)[1:],
            "expanded": lambda: torch.randn(1, 3).expand(n, 3),
        }[layout]()
        return (x,)

    return make


GRAD_LAYOUTS: list[Args] = [
    with_grad_laid_out(n, layout) for n, layout in [
        (2, "contiguous"), (3, "contiguous"), (3, "transposed"), (4, "transposed"),
        (4, "offset"), (5, "expanded"), (2, "transposed"), (6, "contiguous"),
    ]
]


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [read_grad_and_its_strides, sgd_update_from_grad])
def test_an_inputs_grad_changing_size_and_layout_between_calls_matches_eager(
    fn: Callable[..., Any], backend: str, dynamic: bool | None
) -> None:
    # The symbols of the fake .grad have sources (6feb794): guards must catch every change.
    assert_like_eager(fn, GRAD_LAYOUTS, backend=backend, dynamic=dynamic)


GLOBAL_MANAGER = Tracked("first")


def rebind_the_global_manager() -> None:
    global GLOBAL_MANAGER
    print("rebinding")
    GLOBAL_MANAGER = Tracked("second")


def global_manager_rebound_at_the_break(x: torch.Tensor) -> torch.Tensor:
    with GLOBAL_MANAGER:
        y = x * 2
        rebind_the_global_manager()
        y = y + GLOBAL_MANAGER.depth
    return y


class HoldsAManager:
    def __init__(self) -> None:
        self.cm = Tracked("attribute first")


def swap_the_attribute(h: HoldsAManager) -> None:
    print("swapping")
    h.cm = Tracked("attribute second")


def attribute_manager_rebound_at_the_break(x: torch.Tensor, h: HoldsAManager) -> torch.Tensor:
    with h.cm:
        y = x * 2
        swap_the_attribute(h)
        y = y + h.cm.depth
    return y


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_exit_goes_to_the_manager_entered_even_when_its_source_is_rebound(
    backend: str,
) -> None:
    # A handed-on manager read from a global or an attribute that the broken call rebinds:
    # Python calls __exit__ on the object it entered, not on what the name holds afterwards.
    global GLOBAL_MANAGER
    compiled_global = compile_api.compile(global_manager_rebound_at_the_break, backend=backend)
    compiled_attribute = compile_api.compile(
        attribute_manager_rebound_at_the_break, backend=backend
    )
    for _ in range(2):
        seen = []
        for fn in (global_manager_rebound_at_the_break, compiled_global):
            GLOBAL_MANAGER = Tracked("first")
            seen.append(_observe(fn, (X,)))
        assert seen[1]["log"] == seen[0]["log"] == [
            ("enter", "first", 1, True), ("exit", "first", None, 1)
        ]
        _assert_same(seen[1]["result"][1], seen[0]["result"][1], "global")
        seen = [
            _observe(fn, (X, HoldsAManager()))
            for fn in (attribute_manager_rebound_at_the_break, compiled_attribute)
        ]
        assert seen[1]["log"] == seen[0]["log"]
        assert seen[1]["log"][-1] == ("exit", "attribute first", None, 1)
        _assert_same(seen[1]["result"][1], seen[0]["result"][1], "attribute")


# -- found, not fixed ---------------------------------------------------------------------------


def _backward_logs_per_call(fn: Callable[..., Any], calls: int) -> list[list[object]]:
    logs = []
    for _ in range(calls):
        LOG.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            fn(leaf(4, seed=3))
        logs.append(list(LOG))
    return logs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_logging_custom_function_backward_runs_each_call_when_the_graph_is_traced(
    backend: str,
) -> None:
    # Its backward prints and appends to a global: a backend tracing Fn.apply would run them
    # once, so apply runs eagerly at a break (as under torch.compile, checked alongside).
    assert_like_eager(
        logging_custom_function_backward, [lambda: (leaf(4, seed=3),)] * 3, backend=backend
    )
    reference = torch.compile(logging_custom_function_backward, backend="aot_eager")
    assert _backward_logs_per_call(reference, 3) == [["backward"]] * 3


class LoggingForward(PlainSquare):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        LOG.append("forward")
        ctx.save_for_backward(x)
        return x * x


def logging_custom_function_forward(x: torch.Tensor) -> torch.Tensor:
    return LoggingForward.apply(x * 2) + 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_logging_custom_function_forward_runs_once_per_call(backend: str) -> None:
    # Its forward must not run on fakes while tracing either (an extra log entry on the first
    # call even under the eager backend).
    assert_like_eager(logging_custom_function_forward, [lambda: (leaf(4, seed=3),)] * 3,
                      backend=backend)


def pure_custom_function_in_arithmetic(x: torch.Tensor) -> torch.Tensor:
    return PlainSquare.apply(x * 2) + 1


def test_a_pure_custom_function_stays_in_one_graph_as_under_torch_compile() -> None:
    import torch._dynamo as dynamo

    x = leaf(4, seed=3)
    dynamo.reset()
    theirs = dynamo.explain(pure_custom_function_in_arithmetic)(x).graph_count
    assert graph_count(pure_custom_function_in_arithmetic, (x,)) == theirs == 1
    assert_like_eager(pure_custom_function_in_arithmetic, [lambda: (leaf(4, seed=3),)] * 2,
                      backend="aot_eager")


def index_error_before_break_in_manager(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    with Tracked("graph raises"):
        z = torch.index_select(x, 0, idx)
        print("after the select")
        z = z + 1
    return z


def index_error_after_break_in_manager(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    with Tracked("resume raises"):
        print("before the select")
        z = torch.index_select(x, 0, idx)
        z = z + 1
    return z


def index_error_in_manager_without_break(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    with Tracked("no break"):
        z = x[idx] * 2
    return z


def safe_ops_before_break_in_manager(x: torch.Tensor) -> torch.Tensor:
    with Tracked("safe"):
        z = x.sin() * 2
        print("after the sin")
        z = z + 1
    return z


# A graph op that raises at run time on tensor data (an index out of range) inside a user
# manager's block: eager calls __exit__ once, with the error. The graph would raise before the
# transformed code replays __enter__'s effects or reaches __exit__, so such a with statement
# runs as Python (raising_ops): before the break (the manager would be handed on), after it (in
# the resume function, which re-enters the handed-on manager), and with no break at all.
@pytest.mark.parametrize(
    "fn",
    [index_error_before_break_in_manager, index_error_after_break_in_manager,
     index_error_in_manager_without_break],
    ids=["before_the_break", "after_the_break", "without_a_break"],
)
def test_a_runtime_error_in_the_graph_inside_a_handed_on_manager_reaches_its_exit(
    fn: Callable[..., Any],
) -> None:
    assert_like_eager(fn, [(X, torch.tensor([0, 1])), (X, torch.tensor([0, 9])),
                           (X, torch.tensor([3, 2]))])
    LOG.clear()
    with pytest.raises(IndexError):
        compile_api.compile(fn, backend="eager")(X, torch.tensor([0, 9]))
    assert [entry[0] for entry in LOG] == ["enter", "exit"]  # type: ignore[index]
    assert LOG[-1][2] == "IndexError"  # type: ignore[index]


def test_a_manager_block_that_raises_at_run_time_is_not_captured_as_under_torch_compile() -> None:
    import torch._dynamo as dynamo

    args = (X, torch.tensor([0, 1]))
    dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = dynamo.explain(index_error_before_break_in_manager)(*args).graph_count
    assert graph_count(index_error_before_break_in_manager, args) == theirs == 0


def test_a_manager_block_of_ops_that_cannot_raise_on_data_is_still_handed_on() -> None:
    # Pointwise ops raise only on metadata, which the fake tensors check while tracing: the
    # manager is handed on across the break, a graph on each side.
    assert graph_count(safe_ops_before_break_in_manager, (X,)) == 2
    assert_like_eager(safe_ops_before_break_in_manager, [(X,), (X + 1,)])


class Settable:
    """A user class with a property setter (a data descriptor on the class)."""

    def __init__(self) -> None:
        self._n = 0

    @property
    def n(self) -> int:
        return self._n

    @n.setter
    def n(self, v: int) -> None:
        LOG.append(("setter", v))
        self._n = v


def property_set_then_break(x: torch.Tensor) -> torch.Tensor:
    m = Settable()
    m.n = 5
    print("seen", m.n)
    return x * m.n


def property_set_no_break(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    m = Settable()
    m.n = 5
    return x * m.n, m._n


@pytest.mark.parametrize("fn", [property_set_then_break, property_set_no_break])
def test_a_property_setter_runs_as_in_eager(fn: Callable[..., Any]) -> None:
    assert_like_eager(fn, [(X,)])


class LogsSetattr:
    """A user class with its own ``__setattr__`` (which stores through ``object.__setattr__``)."""

    def __setattr__(self, name: str, value: object) -> None:
        LOG.append(("setattr", name, value))
        object.__setattr__(self, name, value)


def store_through_custom_setattr(x: torch.Tensor, m: LogsSetattr) -> torch.Tensor:
    m.depth = 4
    return x * m.depth


def test_a_custom_setattr_runs_once_per_store() -> None:
    assert_like_eager(store_through_custom_setattr, [lambda: (X, LogsSetattr())])


def _numbers(x: torch.Tensor) -> Iterator[torch.Tensor]:
    try:
        LOG.append("started")
        yield x * 2
        yield x * 3
    finally:
        LOG.append(("finally", tuple((x * 4).shape)))


def _managed_numbers(x: torch.Tensor) -> Iterator[torch.Tensor]:
    with Tracked("in generator"):
        yield x + 1
        yield x + 2


def generator_left_suspended(x: torch.Tensor) -> torch.Tensor:
    def numbers() -> Iterator[torch.Tensor]:
        try:
            LOG.append("started")
            yield x * 2
            yield x * 3
        finally:
            LOG.append("finally")

    g = numbers()
    a = next(g)
    return a + 1


def two_generators_left_suspended(x: torch.Tensor) -> torch.Tensor:
    first = _numbers(x)
    second = _managed_numbers(x)
    b = next(second)
    a = next(first)
    LOG.append("before the return")
    return a + b


def generator_dropped_mid_frame(x: torch.Tensor) -> torch.Tensor:
    a = next(_numbers(x))  # its finally runs right here in eager
    LOG.append("after next")
    return a + 1


def generator_left_by_break(x: torch.Tensor) -> torch.Tensor:
    for v in _managed_numbers(x):
        break  # the for loop drops it: __exit__ runs before the append
    LOG.append("after the loop")
    return v * 2


def generator_rebound_mid_frame(x: torch.Tensor) -> torch.Tensor:
    g = _numbers(x)
    a = next(g)
    g = _numbers(x + 1)  # the first one's finally runs here
    LOG.append("rebound")
    return a + next(g)


def generator_finished_before_the_end(x: torch.Tensor) -> torch.Tensor:
    g = _numbers(x)
    total = sum(g, torch.zeros(()))
    return total + 1


def generator_with_a_break_in_its_finally(x: torch.Tensor) -> torch.Tensor:
    def numbers() -> Iterator[torch.Tensor]:
        try:
            yield x * 2
        finally:
            print("closing")  # a graph break inside the handler
            LOG.append("finally")

    g = numbers()
    return next(g) + 1


SUSPENDED = [
    generator_left_suspended, two_generators_left_suspended, generator_dropped_mid_frame,
    generator_left_by_break, generator_rebound_mid_frame, generator_finished_before_the_end,
    generator_with_a_break_in_its_finally,
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", SUSPENDED, ids=[fn.__name__ for fn in SUSPENDED])
def test_a_generator_left_suspended_runs_its_finally_when_eager_does(
    fn: Callable[..., Any], backend: str
) -> None:
    # Eager closes a generator when its last reference dies: at the frame's end for one held
    # in a local (the handlers then run after everything else), right away for a temporary.
    assert_like_eager(fn, [(X,), (X,)], backend=backend)


def test_a_generator_held_to_the_end_stays_in_one_graph() -> None:
    assert graph_count(two_generators_left_suspended, (X,)) == 1


def _stops_itself(x: torch.Tensor) -> Iterator[torch.Tensor]:
    yield x * 2
    raise StopIteration("inside")  # PEP 479: the caller sees a RuntimeError caused by it


def generator_raising_stop_iteration(x: torch.Tensor) -> Any:
    g = _stops_itself(x)
    a = next(g)
    try:
        next(g)
    except RuntimeError as error:
        cause = error.__cause__
        return a + 1, str(error), type(cause).__name__, str(cause), error.__suppress_context__
    return a


def test_a_generator_raising_stop_iteration_gives_eager_runtime_error_in_one_graph() -> None:
    # 3.12+ turns it into RuntimeError in bytecode (CALL_INTRINSIC_1 STOPITERATION_ERROR, the
    # handler around every generator body, which a closed generator's GeneratorExit also
    # passes through); 3.11 in the interpreter.
    assert_like_eager(generator_raising_stop_iteration, [(X,), (X,)])
    assert graph_count(generator_raising_stop_iteration, (X,)) == 1


class Squares(collections.abc.Sequence[int]):
    """A user Sequence: iterating it runs ``Sequence.__iter__``, whose ``try`` only catches
    IndexError."""

    def __getitem__(self, i: int) -> int:  # type: ignore[override]
        if i >= 5:
            raise IndexError(i)
        return i * i

    def __len__(self) -> int:
        return 5


def sequence_left_by_break(x: torch.Tensor) -> torch.Tensor:
    for v in Squares():
        if v > 3:
            break  # drops Sequence.__iter__ suspended inside its try/except IndexError
    LOG.append(("after the loop", v))
    return x * v + (4 in Squares())


def generator_catching_base_exception_dropped(x: torch.Tensor) -> torch.Tensor:
    def numbers() -> Iterator[int]:
        try:
            yield 1
            yield 2
        except BaseException:  # catches the GeneratorExit of its close
            LOG.append("closed")
            raise

    a = next(numbers())
    LOG.append("after next")
    return x + a


@pytest.mark.parametrize(
    "fn", [sequence_left_by_break, generator_catching_base_exception_dropped],
    ids=["sequence_except_indexerror", "except_base_exception"],
)
def test_a_dropped_generator_whose_handler_misses_generator_exit_matches_eager(
    fn: Callable[..., Any],
) -> None:
    # transformers' models iterate user Sequences (Sequence.__iter__ holds a try/except
    # IndexError) and leave them early; closing such a generator runs none of its code, so the
    # frame stays in one graph. A handler that does catch GeneratorExit still runs eagerly.
    assert_like_eager(fn, [(X,), (X,)])


def test_a_sequence_left_early_stays_in_one_graph() -> None:
    compile_api.reset()
    report = compile_api.explain(sequence_left_by_break)(X)
    assert (report.graph_count, report.graph_break_count) == (1, 0)


class Doubles:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @functools.cached_property
    def doubled(self) -> torch.Tensor:
        return self.t * 2


def cached_property_of_a_new_object(x: torch.Tensor) -> torch.Tensor:
    d = Doubles(x)
    return d.doubled + d.doubled


def test_a_cached_property_of_an_object_made_in_the_frame_is_its_value() -> None:
    assert_like_eager(cached_property_of_a_new_object, [(X,)])


class TimesTen:
    """A data descriptor whose ``__set__`` stores ten times the value."""

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return obj.__dict__.get("_v", 0) if obj is not None else self

    def __set__(self, obj: object, value: int) -> None:
        obj.__dict__["_v"] = value * 10


class HasTimesTen:
    v = TimesTen()


def data_descriptor_store_on_an_argument(x: torch.Tensor, w: HasTimesTen) -> torch.Tensor:
    w.v = 3
    return x * w.v


def test_a_data_descriptor_store_is_read_back_through_the_descriptor() -> None:
    assert_like_eager(data_descriptor_store_on_an_argument, [lambda: (X, HasTimesTen())])


def return_star_args(x: torch.Tensor, *args: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    return x * 2, args


def tuple_argument_at_a_break(x: torch.Tensor, t: tuple[int, ...]) -> torch.Tensor:
    y = x * 2
    print("t", t)
    return y + sum(t)


def star_args_at_a_break(x: torch.Tensor, *args: int) -> torch.Tensor:
    y = x * 2
    print("args", args)
    return y + sum(args)


@pytest.mark.parametrize(
    ("fn", "calls"),
    [
        (return_star_args, [(X, 1, 2), (X,), (X, 1, 2, 3)]),
        (tuple_argument_at_a_break, [(X, (1, 2)), (X, ()), (X, (1, 2, 3))]),
        (star_args_at_a_break, [(X, 1, 2), (X,), (X, 1, 2, 3)]),
    ],
    ids=["return_star_args", "tuple_argument_at_a_break", "star_args_at_a_break"],
)
def test_a_tuple_argument_of_another_length_recompiles(
    fn: Callable[..., Any], calls: list[Args]
) -> None:
    assert_like_eager(fn, calls)


@pytest.mark.parametrize(
    ("fn", "calls"),
    [
        (return_star_args, [(X, 1, 2), (X, 5, 6)]),
        (tuple_argument_at_a_break, [(X, (1, 2)), (X, (3, 4))]),
    ],
    ids=["return_star_args", "tuple_argument_at_a_break"],
)
def test_a_tuple_argument_of_the_same_length_matches_eager(
    fn: Callable[..., Any], calls: list[Args]
) -> None:
    # The half that works today (the items' guards): kept so the xfail above is about length.
    assert_like_eager(fn, calls)


def return_in_the_first_iteration_inside_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        for i in range(2):
            print(i)
            return x * 2
    return x


def return_from_except_inside_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        try:
            raise ValueError("boom")
        except (ValueError, ZeroDivisionError):
            return x * 3


def return_in_the_first_iteration_inside_a_user_manager_in_no_grad(
    x: torch.Tensor, n: int
) -> tuple[torch.Tensor, int]:
    with torch.no_grad(), Tracked("inside no_grad"):
        for i in range(n):
            print(i)
            return x * 2, i
    return x, n


def return_in_the_first_iteration_inside_two_grad_blocks(
    x: torch.Tensor,
) -> tuple[torch.Tensor, bool]:
    with torch.no_grad():
        with torch.enable_grad():
            for i in range(2):
                print(i)
                return x * 2, torch.is_grad_enabled()
    return x, False


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    ("fn", "calls"),
    [
        (return_in_the_first_iteration_inside_two_grad_blocks, [(X,), (X,)]),
        (return_in_the_first_iteration_inside_no_grad, [(X,), (X,)]),
        (return_from_except_inside_no_grad, [(X,), (X,)]),
        (return_in_the_first_iteration_inside_a_user_manager_in_no_grad, [(X, 2), (X, 0)]),
    ],
    ids=["two_grad_blocks", "for_body_returns", "except_returns", "user_manager_too"],
)
def test_a_region_returning_from_inside_no_grad_returns_like_eager(
    fn: Callable[..., Any], calls: list[Args], backend: str
) -> None:
    # CAUGHT (session 4 red team; `python -m tests.fuzz --seed 4343`, program 4343001985): a
    # statement region inside a re-entered torch.no_grad() block that leaves by `return` (a for
    # body that always returns, so no back edge; a try whose except returns) made the return an
    # exit of the region: the residual code called the with's exit a second time with the
    # return value where __exit__ should be -- TypeError "'Tensor' object is not callable".
    # Fixed in symbolic_vm/breaks/region.py (a return is never a region exit).
    assert_like_eager(fn, calls, backend=backend)
