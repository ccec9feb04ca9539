"""Python values: constants, containers, builtins, control flow, functions, classes."""

from __future__ import annotations

import collections
import dataclasses
import functools
import math

import pytest
import torch
from vm_harness import check

X = torch.randn(3, 4)


# -- constants, branches and loops -------------------------------------------------------------

def const_folding(x, n=3):
    k = n * 2 + 1
    if k > 5:
        return x * k
    return x


def const_branch_on_arg(x, flag):
    if flag:
        return x + 1
    return x - 1


def const_string_ops(x, mode="Relu"):
    if mode.lower() == "relu" and mode.startswith("R"):
        return torch.relu(x)
    return x


def loop_over_range(x):
    for i in range(3):
        x = x + i
    return x


def while_loop_constant(x):
    i = 0
    while i < 4:
        x = x * 2
        i += 1
    return x


def loop_with_break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x + i
    return x


def nested_loops(x):
    out = []
    for i in range(2):
        for j in range(3):
            out.append(x[i, j])
    return torch.stack(out)


def math_on_constants(x):
    return x * math.sqrt(16) + math.pi * math.floor(2.7) + math.log(math.e)


def ternary_and_boolean_ops(x, a=2, b=None):
    c = a if b is None else b
    d = (a > 1 and b is None) or False
    return x * c if d else x


def none_checks(x, bias=None):
    if bias is not None:
        x = x + bias
    return x


def chained_comparisons(x, n=5):
    if 0 < n < 10:
        return x + n
    return x


def float_inf_and_nan(x):
    return x.clamp(max=float("inf")), float("nan")


@pytest.mark.parametrize("fn,kwargs", [
    (const_folding, {}), (const_folding, {"n": 1}), (const_branch_on_arg, {"flag": True}),
    (const_branch_on_arg, {"flag": False}), (const_string_ops, {}),
    (const_string_ops, {"mode": "none"}), (loop_over_range, {}), (while_loop_constant, {}),
    (loop_with_break_continue, {}), (nested_loops, {}), (math_on_constants, {}),
    (ternary_and_boolean_ops, {}), (ternary_and_boolean_ops, {"b": 3}), (none_checks, {}),
    (none_checks, {"bias": torch.ones(4)}), (chained_comparisons, {}),
    (chained_comparisons, {"n": 50}), (float_inf_and_nan, {}),
])
def test_constants_branches_and_loops(fn, kwargs):
    check(fn, X, **kwargs)


# -- containers ------------------------------------------------------------------------------

def tuple_return(x):
    return x + 1, (x * 2, 3), "s"


def list_building(x):
    items = [x, x + 1]
    items.append(x * 2)
    items.extend([x - 1])
    items.insert(0, x.sum())
    last = items.pop()
    return items, last


def dict_building(x):
    d = {"a": x, "b": x + 1}
    d["c"] = x * 2
    d.update({"e": x - 1})
    total = 0
    for key, value in d.items():
        total = total + value.sum()
    return d, total, list(d.keys()), d.get("zz", 5)


def list_input(xs):
    return [t * 2 for t in xs], len(xs)


def dict_input(d):
    return d["w"] @ d["v"], sorted(d.keys())


def nested_input(spec):
    (a, b), rest = spec["pair"], spec["rest"]
    return a + b + rest[0]


def tuple_slicing(x):
    t = (x, x + 1, x + 2, x + 3)
    return t[1:3], t[::-1][0], t[-1]


def list_comprehension(x):
    return [x * i for i in range(3) if i != 1]


def dict_comprehension(x):
    return {f"k{i}": x + i for i in range(2)}


def set_and_membership(x, name="b"):
    names = {"a", "b"}
    if name in names and "z" not in names:
        return x + 1
    return x


def generator_expression_sum(x):
    return sum(x * i for i in range(4))


def unpacking(x):
    a, *rest, z = [x, x + 1, x + 2, x + 3]
    (p, q), r = (a, z), rest
    return p + q + r[0] + r[1]


def star_args_call(x):
    args = (x, 1)
    kwargs = {"alpha": 2}
    return torch.add(*args, **kwargs)


def zip_enumerate_reversed(x):
    out = x
    for i, (a, b) in enumerate(zip([1, 2, 3], reversed([4, 5, 6]))):
        out = out + i * a - b
    return out


def builtins_on_constants(x):
    values = [3, 1, 2]
    return (x * max(values) + min(values) + sum(values) + abs(-2) + len(values),
            sorted(values), list(reversed(values)), tuple(values), dict(a=1), round(2.6),
            int("3"), float(2), bool(0), str(5), any([0, 1]), all([1, 1]), divmod(7, 2))


def isinstance_checks(x, n=3):
    out = x
    if isinstance(x, torch.Tensor):
        out = out + 1
    if isinstance(n, (int, float)) and not isinstance(n, bool):
        out = out * n
    if type(n) is int:
        out = out - 1
    return out


def getattr_hasattr(x):
    if hasattr(x, "shape") and not hasattr(x, "nope"):
        return getattr(x, "T") + getattr(torch, "ones")(4, 3)
    return x


def fstring_on_constants(x, n=2):
    key = f"layer_{n}_{n * 2:03d}_{'x'!r}"
    return {key: x}


def iter_next(x):
    it = iter([x, x + 1, x + 2])
    first = next(it)
    second = next(it)
    return first + second + next(it), next(iter([]), 7)


def map_filter(x):
    return list(map(lambda t: t + 1, [x, x])), list(filter(None, [0, 1, 2]))


def string_methods(x, name="Layer.Norm"):
    parts = name.split(".")
    return {"-".join(parts).upper(): x, "n": len(name.replace("a", ""))}


@pytest.mark.parametrize("fn", [
    tuple_return, list_building, dict_building, tuple_slicing, list_comprehension,
    dict_comprehension, set_and_membership, generator_expression_sum, unpacking,
    star_args_call, zip_enumerate_reversed, builtins_on_constants, isinstance_checks,
    getattr_hasattr, fstring_on_constants, iter_next, map_filter, string_methods,
])
def test_containers_and_builtins(fn):
    check(fn, X)


def test_list_input():
    check(list_input, [torch.randn(2), torch.randn(2)])


def test_dict_input():
    check(dict_input, {"w": torch.randn(2, 3), "v": torch.randn(3, 2)})


def test_nested_input():
    check(nested_input, {"pair": (torch.randn(2), torch.randn(2)), "rest": [torch.randn(2)]})


# -- functions ------------------------------------------------------------------------------

def helper(x, scale=2.0, *, shift=0.0):
    return x * scale + shift


def varargs_helper(*args, **kwargs):
    total = args[0]
    for a in args[1:]:
        total = total + a
    for k in sorted(kwargs):
        total = total * kwargs[k]
    return total


def calls_helpers(x):
    return helper(x), helper(x, 3.0, shift=1.0), varargs_helper(x, x, 1, a=2, b=3)


def recursive_helper(x, n):
    if n == 0:
        return x
    return recursive_helper(x + 1, n - 1)


def calls_recursive(x):
    return recursive_helper(x, 3)


def closure_inner(x):
    scale = 3

    def inner(y):
        return y * scale

    return inner(x) + inner(1)


def closure_nonlocal(x):
    count = 0

    def bump():
        nonlocal count
        count += 1

    bump()
    bump()
    return x * count


def lambda_use(x):
    f = lambda t, k=2: t * k  # noqa: E731
    return f(x) + f(x, k=3)


def partial_use(x):
    p = functools.partial(torch.add, alpha=2)
    q = functools.partial(helper, scale=5.0)
    return p(x, x), q(x)


def higher_order(x):
    def apply(fn, v):
        return fn(v)

    return apply(torch.sin, x) + apply(lambda v: v * 2, x)


def default_mutable_args(x, sizes=(2, 6)):
    return x.reshape(*sizes)


def kwonly_and_posonly(x, /, y=1, *, z=2):
    return x * y + z


SCALE = 4.0


def reads_global(x):
    return x * SCALE


_closure_value = torch.randn(3, 4)


def make_closure():
    w = _closure_value

    def fn(x):
        return x + w

    return fn


@pytest.mark.parametrize("fn", [
    calls_helpers, calls_recursive, closure_inner, closure_nonlocal, lambda_use, partial_use,
    higher_order, default_mutable_args, kwonly_and_posonly, reads_global, make_closure(),
])
def test_user_functions_are_inlined(fn):
    compiled = check(fn, X)
    assert compiled.graph_count == 1


def test_closure_tensor_becomes_a_graph_input():
    compiled = check(make_closure(), X)
    assert len(compiled.result.graphs[0].example_inputs) == 2


# -- classes ------------------------------------------------------------------------------

@dataclasses.dataclass
class Config:
    scale: float = 2.0
    shift: float = 1.0

    def apply(self, x):
        return x * self.scale + self.shift

    @property
    def total(self):
        return self.scale + self.shift


class Counter:
    kind = "counter"

    def __init__(self, start):
        self.value = start

    def add(self, t):
        self.value = self.value + t
        return self

    @staticmethod
    def double(t):
        return t * 2

    @classmethod
    def make(cls, t):
        return cls(t)


class Base:
    def f(self, x):
        return x + 1


class Derived(Base):
    def f(self, x):
        return super().f(x) * 2


def dataclass_made_inside(x):
    cfg = Config(scale=3.0)
    return cfg.apply(x) + cfg.total


def dataclass_from_input(x, cfg):
    return cfg.apply(x) * cfg.total


def user_class_inside(x):
    c = Counter.make(x)
    c.add(1).add(x)
    return c.value + Counter.double(x), Counter.kind


def user_class_super(x):
    return Derived().f(x)


def returns_new_object(x):
    return Config(scale=x.shape[0], shift=1.5)


@pytest.mark.parametrize("fn", [dataclass_made_inside, user_class_inside, user_class_super])
def test_user_classes(fn):
    check(fn, X)


def test_dataclass_input():
    check(dataclass_from_input, X, Config(1.5, 0.5))


def test_object_created_inside_is_rebuilt_on_return():
    from vm_harness import run_vm

    compiled = run_vm(returns_new_object, X)
    assert compiled.output == returns_new_object(X)


# -- with / try / match ---------------------------------------------------------------------

def with_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y, x * 3


def with_enable_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x + 1
    return y, z


def set_grad_enabled_ctx(x):
    with torch.set_grad_enabled(False):
        y = x * 2
    return y, x + 1


def try_except_no_raise(x):
    try:
        y = x + 1
    except RuntimeError:
        y = x - 1
    return y


def try_finally(x):
    out = []
    try:
        out.append(x * 2)
    finally:
        out.append(x * 3)
    return out


def match_constant(x, mode="mul"):
    match mode:
        case "add":
            return x + 1
        case "mul":
            return x * 2
        case _:
            return x


def match_sequence(x):
    match (1, 2):
        case (a, b):
            return x * a + b
    return x


@pytest.mark.parametrize("fn", [with_no_grad, with_enable_grad, set_grad_enabled_ctx])
def test_grad_mode_contexts_match_eager(fn):
    check(fn, torch.randn(3, requires_grad=True))


@pytest.mark.parametrize("fn", [try_except_no_raise, try_finally, match_constant, match_sequence])
def test_try_and_match(fn):
    check(fn, X)


def test_match_default_branch():
    check(match_constant, X, mode="other")


def autocast_region(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.relu(x @ w)
    return y, y.dtype, (x @ w).dtype


def autocast_disabled_inside(x, w):
    with torch.autocast(device_type="cpu"):
        with torch.autocast(device_type="cpu", enabled=False):
            z = x @ w
        y = x @ w
    return y.dtype, z.dtype, y.float() + z


@pytest.mark.parametrize("fn", [autocast_region, autocast_disabled_inside])
def test_autocast_regions_match_eager_and_leave_the_tracer_clean(fn):
    check(fn, torch.randn(4, 4), torch.randn(4, 4))
    assert not torch.is_autocast_enabled("cpu")


def switches_grad_off(x):
    torch.set_grad_enabled(False)
    return x * 2


def test_unbalanced_grad_mode_change_is_replayed_and_guards_describe_entry_state():
    from vm_harness import run_vm

    x = torch.randn(2, requires_grad=True)
    compiled = run_vm(switches_grad_off, x)  # its guard check runs on the entry state
    assert not torch.is_grad_enabled()  # the transformed code switched it, like eager
    assert not compiled.output.requires_grad
    torch.set_grad_enabled(True)
    assert compiled.guard({"x": x})


def parameter_checks(x, p):
    out = x
    if isinstance(p, torch.nn.Parameter):
        out = out + p
    if type(x) is torch.Tensor and not isinstance(x, torch.nn.Parameter):
        out = out * 2
    if isinstance(x + 1, torch.nn.Parameter):
        out = out - 100
    return out


def test_isinstance_sees_the_real_tensor_class():
    check(parameter_checks, torch.randn(3), torch.nn.Parameter(torch.randn(3)))


def set_results(x):
    s = {1, 2}
    t = {i * 2 for i in range(3)}
    return x * len(s | t), s, t, 2 in t


def test_sets_of_constants_are_rebuilt_fresh_on_every_call():

    compiled = check(set_results, X)
    first = compiled.fn(X)[1]
    first.add(99)
    assert 99 not in compiled.fn(X)[1]


def imports_inside(x):
    import math as m

    import torch.nn.functional
    from torch.nn import functional as fn

    return torch.nn.functional.relu(x) * m.pi + fn.gelu(x)


def test_imports_of_loaded_modules_inside_the_function():
    check(imports_inside, X)


def sorting_with_keys(x):
    named = {"b": x * 2, "a": x + 1, "c": x - 1}
    by_name = sorted(named.items(), key=lambda kv: kv[0])
    widths = [3, 1, 2]
    widths.sort(key=lambda w: -w)
    return [v for _, v in by_name], widths, sorted(["bb", "a", "ccc"], key=len, reverse=True)


def test_sorting_with_constant_keys_keeps_tensor_values():
    check(sorting_with_keys, X)


Pair = collections.namedtuple("Pair", ["left", "right"])


def namedtuple_input(x, pair):
    a, b = pair
    return Pair(a + b, pair.right * x), len(pair), pair[0] * 2


def test_namedtuple_input_and_output():
    compiled = check(namedtuple_input, X, Pair(torch.randn(3, 4), torch.randn(3, 4)))
    assert type(compiled.output[0]) is Pair
