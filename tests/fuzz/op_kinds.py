"""The op family's kinds: one function each, adding one line (an op on earlier values) to a
``Builder``. ``OP_KINDS`` maps each kind to its weight and function; add a kind there."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .op_builder import (
    FLOATS,
    SCALARS_F,
    SCALARS_I,
    Builder,
    broadcasts,
    dtype_name,
    is_int,
)

__all__ = ["OP_KINDS"]


def _unary(b: Builder) -> str:
    x = b.pick()
    t = b.t(x)
    if t.dtype == torch.bool:
        op = b.rng.choice(("torch.logical_not({})", "~{}", "{}.float()", "torch.bitwise_not({})"))
    elif is_int(t):
        op = b.rng.choice(
            (
                "torch.neg({})",
                "torch.abs({})",
                "torch.sign({})",
                "torch.bitwise_not({})",
                "torch.square({})",
                "{} * {}",
                "torch.clamp({}, -3, 4)",
                "{}.to(torch.float32)",
                "torch.sigmoid({})",
                "{}.abs().sqrt()",
            )
        )
    else:
        op = b.rng.choice(
            (
                "torch.neg({})",
                "torch.abs({})",
                "torch.exp({})",
                "torch.sin({})",
                "torch.cos({})",
                "torch.tanh({})",
                "torch.sigmoid({})",
                "torch.relu({})",
                "torch.floor({})",
                "torch.ceil({})",
                "torch.round({})",
                "torch.trunc({})",
                "torch.sign({})",
                "torch.erf({})",
                "torch.expm1({})",
                "torch.log1p({})",
                "torch.frac({})",
                "torch.square({})",
                "torch.rsqrt({})",
                "torch.sqrt({})",
                "torch.log({})",
                "torch.reciprocal({})",
                "torch.isnan({})",
                "torch.isinf({})",
                "torch.isfinite({})",
                "torch.signbit({})",
                "torch.nan_to_num({})",
                "torch.exp2({})",
                "torch.log2({})",
                "torch.atan({})",
                "torch.asinh({})",
                "F.gelu({})",
                "F.gelu({}, approximate='tanh')",
                "F.silu({})",
                "F.softplus({})",
                "F.elu({})",
                "F.leaky_relu({}, 0.1)",
                "F.hardtanh({})",
                "F.hardswish({})",
                "F.mish({})",
                "torch.round({}, decimals=1)",
                "{}.abs().pow(0.5)",
                "{}.pow(2)",
                "{}.pow(3)",
                "torch.logit({}.sigmoid())",
                "F.relu6({})",
                "torch.erfinv({}.tanh() * 0.9)",
                "torch.lgamma({})",
                "torch.digamma({}.abs() + 0.5)",
            )
        )
    return b.emit(op.format(x, x), "unary")


BINARY = (
    "torch.add({}, {})",
    "torch.sub({}, {})",
    "torch.mul({}, {})",
    "torch.div({}, {})",
    "torch.div({}, {}, rounding_mode='floor')",
    "torch.div({}, {}, rounding_mode='trunc')",
    "torch.remainder({}, {})",
    "torch.fmod({}, {})",
    "torch.maximum({}, {})",
    "torch.minimum({}, {})",
    "torch.fmax({}, {})",
    "torch.fmin({}, {})",
    "torch.pow({}, {})",
    "torch.atan2({}, {})",
    "torch.eq({}, {})",
    "torch.ne({}, {})",
    "torch.lt({}, {})",
    "torch.le({}, {})",
    "torch.gt({}, {})",
    "torch.ge({}, {})",
    "torch.logical_and({}, {})",
    "torch.logical_or({}, {})",
    "torch.logical_xor({}, {})",
    "torch.bitwise_and({}, {})",
    "torch.bitwise_or({}, {})",
    "torch.bitwise_xor({}, {})",
    "torch.bitwise_left_shift({}, {})",
    "torch.bitwise_right_shift({}, {})",
    "torch.hypot({}, {})",
    "torch.copysign({}, {})",
    "({} // {})",
    "({} % {})",
    "({} ** {})",
    "({} - {})",
    "({} / {})",
    "({} << {})",
    "({} >> {})",
    "({} & {})",
    "({} | {})",
    "({} ^ {})",
    "torch.xlogy({}, {})",
    "torch.float_power({}, {})",
    "torch.floor_divide({}, {})",
)


def _binary(b: Builder) -> str:
    x = b.pick()
    t = b.t(x)
    op = b.rng.choice(BINARY)
    r = b.rng.random()
    if r < 0.25:
        scalars = SCALARS_F if t.is_floating_point() else SCALARS_I
        y = b.rng.choice(scalars)
    elif r < 0.45:
        dtype = b.random_dtype()
        fill = "shift:8" if "shift" in op or "<<" in op or ">>" in op else ""
        y = b.add_input(
            b.related_shape(tuple(t.shape)), dtype, fill=fill, grad=b.grad and b.rng.random() < 0.3
        )
    else:
        y = b.pick(lambda u: broadcasts(u.shape, t.shape))
    if b.rng.random() < 0.2:
        x, y = y, x
    return b.emit(op.format(x, y), "binary")


def _where_clamp(b: Builder) -> str:
    x = b.pick()
    t = b.t(x)
    r = b.rng.random()
    scal = SCALARS_F if t.is_floating_point() else SCALARS_I
    if r < 0.4:
        cond = (
            b.pick(lambda u: u.dtype == torch.bool and broadcasts(u.shape, t.shape))
            if b.rng.random() < 0.5
            else f"({x} > {b.rng.choice(('0', '0.5', '-1'))})"
        )
        other = (
            b.rng.choice(scal)
            if b.rng.random() < 0.4
            else b.pick(lambda u: broadcasts(u.shape, t.shape))
        )
        args = (x, other) if b.rng.random() < 0.5 else (other, x)
        return b.emit(f"torch.where({cond}, {args[0]}, {args[1]})", "where")
    if r < 0.75:
        lo, hi = b.rng.choice(scal), b.rng.choice(scal + ("None",))
        form = b.rng.choice(
            (
                "torch.clamp({0}, {1}, {2})",
                "torch.clamp({0}, min={1}, max={2})",
                "{0}.clamp(max={2}, min={1})",
            )
        )
        if hi == "None" and lo == "None":
            hi = "1"
        return b.emit(form.format(x, lo, hi), "clamp")
    other = b.pick(lambda u: broadcasts(u.shape, t.shape))
    op = b.rng.choice(
        (
            "torch.clamp({}, min={})",
            "torch.clamp({}, max={})",
            "torch.clamp_min({}, {})",
            "torch.minimum({}, {})",
            "torch.maximum({}, {})",
        )
    )
    return b.emit(op.format(x, other), "clamp")


def _cast(b: Builder) -> str:
    x = b.pick()
    t = b.t(x)
    dtype = b.random_dtype()
    if t.is_floating_point() and dtype in ("int32", "int64"):
        # a float outside the integer range (NaN, inf) converts to an unspecified value
        return b.emit(
            f"torch.nan_to_num({x}, 0.0, 50.0, -50.0).clamp(-50, 50).to(torch.{dtype})", "cast"
        )
    form = b.rng.choice(("{}.to(torch.{})", "{}.type(torch.{})", "{}.to(dtype=torch.{})"))
    return b.emit(form.format(x, dtype), "cast")


REDUCTIONS = (
    "torch.sum({x}, {dims}, keepdim={k})",
    "torch.mean({x}, {dims}, keepdim={k})",
    "torch.amax({x}, {dims}, keepdim={k})",
    "torch.amin({x}, {dims}, keepdim={k})",
    "torch.argmax({x}, {d}, keepdim={k})",
    "torch.argmin({x}, {d}, keepdim={k})",
    "torch.var({x}, {dims}, correction={c}, keepdim={k})",
    "torch.std({x}, {dims}, correction={c}, keepdim={k})",
    "torch.prod({x}, {d}, keepdim={k})",
    "torch.any({x}, {d}, keepdim={k})",
    "torch.all({x}, {d}, keepdim={k})",
    "torch.logsumexp({x}, {dims}, keepdim={k})",
    "torch.max({x}, {d}, keepdim={k})[0]",
    "torch.min({x}, {d}, keepdim={k}).indices",
    "{x}.sum()",
    "{x}.amax()",
    "{x}.mean()",
    "{x}.sum(dtype=torch.float64)",
    "{x}.norm(dim={dims})",
    "torch.var_mean({x}, {d})[{i}]",
    "{x}.count_nonzero({d})",
    "torch.sum({x}, {dims}, dtype=torch.float32)",
    "torch.nansum({x}, {d})",
    "{x}.float().var()",
    "torch.max({x}, {d})[1]",
)


def _reduction(b: Builder) -> str:
    x = b.pick(lambda u: u.dim() >= 1)
    t = b.t(x)
    nd = t.dim()
    dims = sorted(b.rng.sample(range(nd), b.rng.randint(1, nd)))
    dims_text = str(tuple(d - nd if b.rng.random() < 0.3 else d for d in dims))
    form = b.rng.choice(REDUCTIONS)
    expr = form.format(
        x=x,
        dims=dims_text,
        d=b.rng.randrange(-nd, nd),
        k=b.rng.random() < 0.4,
        c=b.rng.choice((0, 1)),
        i=b.rng.choice((0, 1)),
    )
    return b.emit(expr, "reduction")


def _view(b: Builder) -> str:
    x = b.pick()
    t = b.t(x)
    nd = t.dim()
    rng = b.rng
    forms: list[str] = ["{x}.reshape(-1)", "{x}.unsqueeze({u})", "{x}.flatten()"]
    if nd >= 1:
        d = rng.randrange(nd)
        size = t.shape[d]
        forms += [
            "{x}.narrow({d}, 0, {half})",
            "{x}.select({d}, -1)",
            "{x}.flip({d})",
            "{x}.roll({k}, {d})",
            "{x}.unfold({d}, {half}, {step})",
            "{x}[{sl}]",
            "{x}.movedim({d}, 0)",
            "{x}.squeeze({d})",
            "{x}.expand(2, *{x}.shape)",
            "{x}.contiguous()",
            "{x}.clone()",
            "torch.as_strided({x}.contiguous(), ({half},), ({step},), {off})",
            "torch.nn.functional.pad({x}, ({k}, {step}), value=1)",
        ]
        if 1 in t.shape:
            forms.append(
                "{x}.expand("
                + ", ".join(str(rng.choice((3, 4)) if s == 1 else s) for s in t.shape)
                + ")"
            )
    if nd >= 2:
        forms += [
            "{x}.transpose({d}, {e})",
            "{x}.permute(" + ", ".join(map(str, rng.sample(range(nd), nd))) + ")",
            "{x}.diagonal()",
            "{x}.mT",
            "{x}.flatten(0, 1)",
        ]
    if nd == 2:
        forms.append("{x}.t()")
    if nd == 4:
        forms.append("{x}.contiguous(memory_format=torch.channels_last)")
    d = rng.randrange(nd) if nd else 0
    size = t.shape[d] if nd else 1
    sl = ", ".join(
        [":"] * d + [rng.choice(("::2", "1::2", "1:", ":-1", "::-1", "-2:", "None", "..."))]
    )
    expr = rng.choice(forms).format(
        x=x,
        d=d,
        e=rng.randrange(max(nd, 1)),
        half=max(1, size // 2),
        k=rng.choice((1, -1, 2)),
        step=rng.choice((1, 2)),
        sl=sl.replace("::-1", "::2"),
        u=rng.randrange(-nd - 1, nd + 1),
        off=rng.choice((0, 1)),
    )
    return b.emit(expr, "view")


def _indexing(b: Builder) -> str:
    rng = b.rng
    x = b.pick(lambda u: u.dim() >= 1 and u.numel() > 0)
    t = b.t(x)
    nd = t.dim()
    d = rng.randrange(nd)
    size = t.shape[d]
    r = rng.random()
    if r < 0.2:
        shape = tuple(s if i != d else rng.randint(1, 4) for i, s in enumerate(t.shape))
        idx = b.add_input(shape, "int64", fill=f"index:0:{size}", layout="contig")
        return b.emit(f"torch.gather({x}, {d}, {idx})", "gather")
    if r < 0.35:
        idx = b.add_input(
            (rng.randint(1, 5),),
            rng.choice(("int64", "int32")),
            fill=f"index:0:{size}",
            layout="contig",
        )
        return b.emit(f"torch.index_select({x}, {d}, {idx})", "index_select")
    if r < 0.5:
        idx = b.add_input(
            (rng.randint(1, 5),), "int64", fill=f"index:{-size}:{size}", layout="contig"
        )
        sl = ", ".join([":"] * d + [idx])
        return b.emit(f"{x}[{sl}]", "advanced_index")
    if r < 0.62 and rng.random() < 0.4:
        # one index per row along d: lowered as a bounds-checked where (cross-entropy's backward)
        shape = tuple(1 if i == d else s for i, s in enumerate(t.shape))
        idx = b.add_input(shape, "int64", fill=f"index:0:{size}", layout="contig")
        src = b.add_input(shape, dtype_name(t.dtype), grad=b.grad)
        op = rng.choice(("torch.scatter({x}, {d}, {i}, {s})", "{x}.scatter({d}, {i}, -1.0)"))
        return b.emit(op.format(x=x, d=d, i=idx, s=src), "scatter")
    if r < 0.62:
        idx = b.add_input(tuple(t.shape), "int64", fill=f"perm:{d}", layout="contig")
        src = b.add_input(tuple(t.shape), dtype_name(t.dtype), grad=b.grad)
        op = rng.choice(
            (
                "torch.scatter({x}, {d}, {i}, {s})",
                "torch.scatter_add({x}, {d}, {i}, {s})",
                "{x}.scatter({d}, {i}, 1.5)",
                "torch.scatter_reduce({x}, {d}, {i}, {s}, 'amax')",
            )
        )
        return b.emit(op.format(x=x, d=d, i=idx, s=src), "scatter")
    if r < 0.74:
        idx = b.add_input(
            (rng.randint(1, 5),), "int64", fill=f"index:{-size}:{size}", layout="contig"
        )
        vals_shape = (idx_len := b.specs[-1][0][0],) + tuple(t.shape[1:]) if d == 0 else None
        if vals_shape is None:
            return b.emit(
                f"{x}.index_put(({idx},), torch.tensor(2.5).to({x}.dtype), accumulate=True)",
                "index_put",
            )
        del idx_len
        vals = b.add_input(vals_shape, dtype_name(t.dtype))
        return b.emit(f"{x}.index_put(({idx},), {vals}, accumulate=True)", "index_put")
    if r < 0.88:
        mask = (
            b.pick(lambda u: u.dtype == torch.bool and broadcasts(u.shape, t.shape))
            if rng.random() < 0.5
            else f"({x} > 0)"
        )
        val = rng.choice(SCALARS_F if t.is_floating_point() else SCALARS_I[:5])
        return b.emit(f"{x}.masked_fill({mask}, {val})", "masked_fill")
    return b.emit(f"{x}[{x} > 0]" if t.dtype != torch.bool else f"{x}[{x}]", "bool_mask")


def _cat(b: Builder) -> str:
    rng = b.rng
    x = b.pick(lambda u: u.dim() >= 1)
    t = b.t(x)
    d = rng.randrange(t.dim())
    r = rng.random()
    if r < 0.35:
        y = b.pick(
            lambda u: (
                u.dim() == t.dim()
                and all(u.shape[i] == t.shape[i] for i in range(t.dim()) if i != d)
            )
        )
        return b.emit(f"torch.cat([{x}, {y}], {d})", "cat")
    if r < 0.55:
        return b.emit(f"torch.cat([{x}, {x} * 2, {x}[:0]], {d})", "cat")
    if r < 0.7:
        y = b.pick(lambda u: u.shape == t.shape)
        return b.emit(
            f"torch.stack([{x}, {y}], {rng.randrange(-t.dim() - 1, t.dim() + 1)})", "stack"
        )
    k = max(1, t.shape[d] // 2)
    form = rng.choice(
        (
            "torch.split({x}, {k}, {d})[{i}]",
            "torch.chunk({x}, 2, {d})[{j}]",
            "{x}.tensor_split(2, {d})[{j}]",
            "torch.split({x}, [{k}, {rest}], {d})[{j}]",
            "torch.unbind({x}, {d})[0]",
        )
    )
    return b.emit(
        form.format(
            x=x, k=k, d=d, i=rng.choice((0, -1)), j=rng.choice((0, 1)), rest=t.shape[d] - k
        ),
        "split",
    )


def _scan_sort(b: Builder) -> str:
    rng = b.rng
    if rng.random() < 0.5:
        x = b.add_input(
            b.random_shape(rng.randint(1, 3)) or (4,),
            rng.choice(FLOATS + ("int64",)),
            fill="distinct",
            grad=b.grad,
        )
    else:
        x = b.pick(lambda u: u.dim() >= 1)
    t = b.t(x)
    nd = t.dim()
    d = rng.randrange(-nd, nd)
    k = max(1, t.shape[d] // 2)
    form = rng.choice(
        (
            "torch.cumsum({x}, {d})",
            "torch.cumprod({x}, {d})",
            "torch.sort({x}, {d})[0]",
            "torch.sort({x}, {d}, descending=True)[1]",
            "torch.topk({x}, {k}, {d})[0]",
            "torch.topk({x}, {k}, {d}, largest=False)[1]",
            "torch.argsort({x}, {d})",
            "torch.cummax({x}, {d})[0]",
            "torch.logcumsumexp({x}, {d})",
            "torch.cumsum({x}, {d}, dtype=torch.float64)",
            "torch.sort({x}, {d}, stable=True)[1]",
            "torch.msort({x})",
        )
    )
    return b.emit(form.format(x=x, d=d, k=k), "scan_sort")


def _norm(b: Builder) -> str:
    rng = b.rng
    dtype = rng.choice(("float32", "float32", "float64", "float16", "bfloat16"))
    r = rng.random()
    if r < 0.3:
        x = b.pick(lambda u: u.is_floating_point() and u.dim() >= 1)
        d = rng.randrange(-b.t(x).dim(), b.t(x).dim())
        form = rng.choice(
            (
                "torch.softmax({x}, {d})",
                "torch.log_softmax({x}, {d})",
                "F.normalize({x}, dim={d})",
                "torch.softmax({x}, {d}, dtype=torch.float32)",
                "F.softmin({x}, {d})",
            )
        )
        return b.emit(form.format(x=x, d=d), "softmax")
    shape = b.random_shape(rng.choice((2, 3, 4)))
    shape = tuple(max(s, 2) for s in shape)
    x = b.add_input(shape, dtype, grad=b.grad)
    c = shape[1]
    if r < 0.55:
        k = rng.randint(1, len(shape) - 1)
        w = b.add_input(shape[-k:], dtype, grad=b.grad) if rng.random() < 0.7 else "None"
        bias = b.add_input(shape[-k:], dtype, grad=b.grad) if rng.random() < 0.6 else "None"
        return b.emit(
            f"F.layer_norm({x}, {shape[-k:]}, {w}, {bias}, eps={rng.choice(('1e-5', '1e-3'))})",
            "layer_norm",
        )
    if r < 0.75:
        groups = rng.choice([g for g in (1, 2, c) if c % g == 0])
        w = b.add_input((c,), dtype, grad=b.grad)
        bias = b.add_input((c,), dtype, grad=b.grad)
        return b.emit(f"F.group_norm({x}, {groups}, {w}, {bias})", "group_norm")
    training = rng.random() < 0.6
    stat = "float32" if dtype in ("float16", "bfloat16") else dtype
    mean = b.add_input((c,), stat, layout="contig")
    var = b.add_input((c,), stat, fill="positive", layout="contig")
    w = b.add_input((c,), stat, grad=b.grad) if rng.random() < 0.7 else "None"
    bias = b.add_input((c,), stat, grad=b.grad) if rng.random() < 0.7 else "None"
    return b.emit(
        f"F.batch_norm({x}, {mean}, {var}, {w}, {bias}, training={training}, momentum=0.1)",
        "batch_norm",
    )


def _matmul(b: Builder) -> str:
    rng = b.rng
    dtype = rng.choice(("float32", "float32", "float64", "float16", "bfloat16"))
    r = rng.random()
    m, k, n = (rng.choice((1, 2, 3, 5, 8)) for _ in range(3))
    if r < 0.35:
        x = (
            b.pick(lambda u: u.is_floating_point() and u.dim() >= 1 and u.shape[-1] > 0)
            if rng.random() < 0.5
            else b.add_input((m, k), dtype, grad=b.grad)
        )
        kk = b.t(x).shape[-1]
        w = b.add_input((kk, n), dtype_name(b.t(x).dtype), grad=b.grad)
        form = rng.choice(
            (
                "{x} @ {w}",
                "torch.matmul({x}, {w})",
                "F.linear({x}, {w}.t())",
                "torch.relu({x} @ {w}) * 0.5",
            )
        )
        return b.emit(form.format(x=x, w=w), "matmul")
    if r < 0.55:
        bb = rng.choice((1, 2, 3))
        x = b.add_input((bb, m, k), dtype, grad=b.grad)
        w = b.add_input((bb, k, n), dtype, grad=b.grad)
        form = rng.choice(
            ("torch.bmm({x}, {w})", "torch.baddbmm({x} @ {w}, {x}, {w})", "({x} @ {w}).sigmoid()")
        )
        return b.emit(form.format(x=x, w=w), "bmm")
    if r < 0.7:
        x = b.add_input((m, k), dtype, grad=b.grad)
        w = b.add_input((k, n), dtype, grad=b.grad)
        bias = b.add_input((n,), dtype, grad=b.grad)
        return b.emit(
            f"torch.addmm({bias}, {x}, {w}, beta={rng.choice(('1', '0.5'))}, "
            f"alpha={rng.choice(('1', '2'))})",
            "addmm",
        )
    cin, cout = rng.choice((1, 2, 3)), rng.choice((1, 2, 4))
    groups = rng.choice([g for g in (1, cin) if cout % g == 0 and cin % g == 0])
    two_d = rng.random() < 0.7
    spatial = (rng.randint(3, 6), rng.randint(3, 6)) if two_d else (rng.randint(3, 8),)
    x = b.add_input((rng.choice((1, 2)), cin, *spatial), dtype, grad=b.grad)
    ks = (rng.choice((1, 2, 3)),) * len(spatial)
    w = b.add_input((cout, cin // groups, *ks), dtype, grad=b.grad)
    bias = b.add_input((cout,), dtype, grad=b.grad) if rng.random() < 0.6 else "None"
    conv = "F.conv2d" if two_d else "F.conv1d"
    stride, pad = rng.choice((1, 2)), rng.choice((0, 1))
    epi = rng.choice(("{}", "torch.relu({})", "F.silu({}) + 1", "{}.clamp(-1, 1)"))
    return b.emit(
        epi.format(f"{conv}({x}, {w}, {bias}, stride={stride}, padding={pad}, groups={groups})"),
        "conv",
    )


def _inplace(b: Builder) -> str:
    """An in-place write to an argument, to a view of one, or to an intermediate."""
    rng = b.rng
    grad_args = {f"a{i}" for i in b.requires_grad}
    names = (
        [n for n in b.values if n.startswith("a") and n not in grad_args]
        if rng.random() < 0.7
        else []
    )
    target = rng.choice(names) if names else b.pick()
    t = b.t(target)
    view = rng.choice(
        (
            "{}",
            "{}",
            "{}[0]",
            "{}[..., ::2]",
            "{}.t()" if t.dim() == 2 else "{}",
            "{}[1:]",
            "{}.unsqueeze(0)",
        )
    )
    dest = view.format(target)
    src = b.pick(lambda u: broadcasts(u.shape, t.shape) and u is not t)
    scal = rng.choice(SCALARS_F if t.is_floating_point() else SCALARS_I[:5])
    form = rng.choice(
        (
            "{d}.add_({s})",
            "{d}.mul_({c})",
            "{d}.zero_()",
            "{d}.clamp_(min={c})",
            "{d}.copy_({s})",
            "{d}.fill_({c})",
            "{d}.masked_fill_({d} > 0, {c})",
            "torch.relu_({d})",
            "{d}.sub_({s}, alpha=2)",
            "{d}.div_({c})",
            "{d}.index_add_(0, torch.tensor([0, 0]), {d}[:1].expand(2, *{d}.shape[1:]).clone())",
            "{d}.neg_()",
        )
    )
    stmt = form.format(d=dest, s=src, c=scal)
    b.emit_stmt(stmt)
    return target


OP_KINDS: dict[str, tuple[int, Callable[[Builder], str]]] = {
    "unary": (14, _unary),
    "binary": (18, _binary),
    "where_clamp": (8, _where_clamp),
    "cast": (5, _cast),
    "reduction": (12, _reduction),
    "view": (12, _view),
    "indexing": (8, _indexing),
    "cat": (5, _cat),
    "scan_sort": (5, _scan_sort),
    "norm": (6, _norm),
    "matmul": (6, _matmul),
    "inplace": (6, _inplace),
}
