"""Late construct family of session 10: data-dependent sizes and values (``data_dependent``).

Aimed at the class of bugs PyTorch's own tests found and this fuzzer did not (a ``torch._check``
on an unbacked size dropped, so a failed check returned a value; ``GuardOnDataDependentSymNode``
escaping a non-fullgraph compile from a setitem with data-dependent bounds): ``nonzero``,
boolean masks, ``unique``, ``torch.where(cond)``, ``repeat_interleave``, ``item()`` and
``tolist()`` read back as Python numbers and used as sizes, slice bounds, indices and in
branches, ``torch._check``/``torch._check_is_size`` on them (on some calls the check fails:
eager raises ``RuntimeError``, caught in the program or escaping ``fn``, type compared), slice
and index assignment with data-dependent bounds, and tensors whose size is data-dependent
reduced back to a scalar.

Each program draws how it is compiled (``COMPILE_CONFIG``: ``capture_scalar_outputs`` and
``capture_dynamic_output_shape_ops`` on or off; ``COMPILE_DYNAMIC``: None, True or False), which
the runner applies to the compiled run only. Every construct runs eagerly without raising
except the declared escapes (``EXPECTED_EXCEPTION_TYPES``).
"""

from __future__ import annotations

import random

from .families import Family, _Names

__all__ = ["DATA_FAMILIES"]


def _brk(rng: random.Random, what: str) -> list[str]:
    """A graph break (or none) at this point."""
    kind = rng.randrange(4)
    if kind == 0:
        return [f"print('brk', {what})"]
    if kind == 1:
        return ["torch._dynamo.graph_break()"]
    return []


# How many elements a data-dependent count keeps (0..len(x) for every input).
_COUNTS = [
    "(x > 0).sum()",
    "(x > y).sum()",
    "(x.abs() < 1.0).sum()",
    "torch.count_nonzero(x > 0.5)",
    "(x * y > 0).long().sum()",
]
_READS = [
    "int({c}.item())",
    "{c}.item()",
    "int({c})",
    "{c}.tolist()",
]


def data_dependent(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("data_dependent")
    name = _Names(k)
    scalars = rng.random() < 0.5
    shapes = rng.random() < 0.5
    dynamic = rng.choice(["None", "True", "False"])
    f.prelude = [
        f"COMPILE_CONFIG = {{'capture_scalar_outputs': {scalars}, "
        f"'capture_dynamic_output_shape_ops': {shapes}}}",
        f"COMPILE_DYNAMIC = {dynamic}",
        "EXPECTED_EXCEPTION_TYPES = globals().get('EXPECTED_EXCEPTION_TYPES', ()) "
        "+ ('RuntimeError',)",
    ]
    escaped = False
    for _ in range(rng.randint(2, 4)):
        form = rng.randrange(16)
        t, q, c, m = name("t"), name("q"), name("c"), name("m")
        count = rng.choice(_COUNTS)
        read = rng.choice(_READS).format(c=f"({count})")
        if form == 0:  # nonzero: indices of a data-dependent length, gathered and reduced
            f.head += [
                f"{m} = torch.nonzero({rng.choice(['x > 0', 'x > y', 'y < 0.5'])})"
                f"{rng.choice(['.flatten()', '[:, 0]', '.squeeze(1)'])}",
                f"{q} = {m}.shape[0]",
                *_brk(rng, q),
                f"{t} = y + x[{m}].sum() * 0.5 + {q}",
            ]
        elif form == 1:  # a boolean mask: data-dependent size, its sum, mean (NaN when empty)
            f.head += [
                f"{m} = x[{rng.choice(['x > 0', 'x > y', 'y.abs() < 1.0'])}]",
                f"{q} = {m}.numel()",
                f"{t} = y * {q} + " + rng.choice([
                    f"{m}.sum()",
                    f"({m}.amax(0, keepdim=True).sum() if {q} > 0 else x.sum())",
                    f"{m}.mul(2.0).sum()",
                ]),
            ]
        elif form == 2:  # unique (sorted), with counts or inverse
            kw = rng.choice(["", ", return_counts=True", ", return_inverse=True"])
            f.head += [f"{m} = torch.unique(torch.round(x * 2.0){kw})"]
            if kw:
                f.head += [f"{m}, {c} = {m}", f"{q} = {m}.shape[0] + int({c}.sum())"]
            else:
                f.head += [f"{q} = {m}.shape[0]"]
            f.head += [f"{t} = y * {q} + {m}.sum()"]
        elif form == 3:  # a float item() used in arithmetic and in a branch
            f.head += [
                f"{q} = {rng.choice(['x.sum()', 'x.max()', '(x * y).mean()'])}.item()",
                *_brk(rng, q),
                f"if {q} > {rng.choice(['0.0', '0.5', '-1.0'])}:",
                f"    {t} = y * {q}",
                "else:",
                f"    {t} = y - {q}",
            ]
        elif form == 4:  # an int count as a slice bound, checked as a size
            f.head += [f"{c} = {read}"]
            if rng.random() < 0.5:
                f.head.append(f"torch._check_is_size({c})")
            if rng.random() < 0.5:
                f.head.append(f"torch._check({c} <= x.shape[0])")
            f.head += [
                *_brk(rng, c),
                f"{t} = torch.cat([x[:{c}], y[{c}:]])",
                f"{q} = {c} * 2 + n",
            ]
        elif form == 5:  # setitem with data-dependent bounds
            f.head += [
                f"{c} = {read}",
                f"{t} = x.clone()",
                rng.choice([
                    f"{t}[:{c}] = y[:{c}] * 2.0",
                    f"{t}[{c}:] = 0.0",
                    f"{t}[{c}:] = y[{c}:] + 1.0",
                    f"{t}[:{c}] += 1.5",
                ]),
                f"{q} = {c}",
            ]
        elif form == 6:  # tolist() of a mask, summed and indexed in Python
            f.head += [
                f"{m} = (x > {rng.choice(['0', '0.5', 'y'])}).int().tolist()",
                f"{q} = sum({m}) + {m}[0]",
                *_brk(rng, q),
                f"{t} = x * {m}[-1] + y * {q}",
            ]
        elif form == 7:  # a failing torch._check, caught
            bound = rng.choice(["2", "3", "n", "n + 1"])
            f.head += [
                f"{c} = {read}",
                f"{t} = x + 1.0",
                "try:",
                f"    torch._check({c} <= {bound})",
                f"    {t} = {t} * 2.0",
                "except RuntimeError:",
                f"    LOG.append(('check failed', {c}))",
                f"{q} = {c}",
            ]
        elif form == 8:  # a size made of a data-dependent count: arange, new_zeros, full
            f.head += [
                f"{c} = {read}",
                f"torch._check_is_size({c})" if rng.random() < 0.5 else f"{q} = 0",
                f"{m} = " + rng.choice([
                    f"torch.arange({c}, dtype=torch.float32)",
                    f"x.new_ones({c})",
                    f"torch.full(({c}, 2), 0.5)",
                    f"torch.zeros({c}) + 1.0",
                ]),
                f"{q} = {m}.numel()",
                f"{t} = y + {m}.sum()",
            ]
        elif form == 9:  # repeat_interleave with data-dependent counts
            f.head += [
                f"{m} = torch.repeat_interleave(x, (x > 0).long() + 1)",
                f"{q} = {m}.shape[0]",
                f"{t} = y + {m}.sum() - {q}",
            ]
        elif form == 10:  # argmax as a Python index: read and write through it
            f.head += [
                f"{c} = int("
                f"{rng.choice(['x.argmax()', 'y.argmin()', '(x - y).abs().argmax()'])}.item())",
                f"torch._check({c} < x.shape[0])" if rng.random() < 0.5 else f"{q} = {c}",
                f"{t} = y.clone()",
                f"{t}[{c}] = x[{c}] * 3.0",
                f"{q} = {c}",
            ]
        elif form == 11:  # torch.where(cond): a tuple of index tensors
            f.head += [
                f"({m},) = torch.where({rng.choice(['x > 0', 'x < y'])})",
                f"{t} = y.clone()",
                f"{t}[{m}] = {rng.choice(['0.0', f'x[{m}] * 2.0', '-1.0'])}",
                f"{q} = len({m})",
            ]
        elif form == 12:  # mask assignment and masked_select (size not data-dependent / is)
            f.head += [
                f"{t} = x.clone()",
                f"{t}[{t} > 0] = {rng.choice(['0.0', 'y[' + t + ' > 0]', '1.0'])}",
                f"{m} = torch.masked_select(y, x > 0)",
                f"{q} = {m}.numel()",
            ]
        elif form == 13:  # a Python loop over tolist() of nonzero indices
            f.head += [
                f"{t} = y.clone()",
                f"for i{t} in (x > 0).nonzero().flatten().tolist():",
                f"    {t}[i{t}] = {t}[i{t}] + i{t}",
                *_brk(rng, t),
                f"{q} = int(({t} != y).sum())",
            ]
        elif form == 14 and not escaped:  # a check that fails on some calls escapes fn
            escaped = True
            f.head += [
                f"{c} = {read}",
                f"LOG.append(('before check', {c}))",
                rng.choice([
                    f"torch._check({c} <= {rng.choice(['2', 'n', '3'])})",
                    f"torch._check({c} != {rng.choice(['0', '1'])}, lambda: 'count ' + str({c}))",
                    f"torch._check_is_size({c} - {rng.choice(['1', '2'])})",
                ]),
                f"{t} = x[:{c}].sum() + y",
                f"{q} = {c}",
            ]
        else:  # a data-dependent narrow of an input written in place
            f.head += [
                f"{c} = {read}",
                f"{t} = x * 1.0",
                f"{t}.narrow(0, 0, {c})."
                + rng.choice(["mul_(2.0)", "zero_()", f"add_(y[:{c}])"]),
                f"{q} = {t}.sum().item()",
            ]
        f.tensors[t] = 1
        f.returns.append(q)  # every form binds q
    return f


DATA_FAMILIES = {"data_dependent": data_dependent}
