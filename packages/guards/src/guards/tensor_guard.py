"""TENSOR_MATCH: a tensor's class, dtype, device, requires_grad, dispatch keys, sizes and
strides, checked in one C++ call where the extension is built."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch

from guards.guard import CodeContext, Guard, type_name
from guards.native import tensor_check
from guards.tensor_spec import StrideRel, TensorSpec, plain_torch_function


def _stride_text(expr: int | StrideRel) -> str:
    return str(expr)


@attrs.frozen
class TensorMatch(Guard):
    """Class, dtype, device, requires_grad, dispatch keys, ndim, sizes, strides of a tensor.

    Dynamic dims (``sizes[i] is None``) are checked for ``size >= 2``; strides follow
    ``tensor_spec.stride_rule``.  The thread-local dispatch include/exclude sets are checked
    once per guard function by the DISPATCH_TLS guard that ``GuardSet.TENSOR_MATCH`` adds.
    """

    kind: ClassVar[str] = "TENSOR_MATCH"
    rank: ClassVar[int] = 5
    spec: TensorSpec

    def merge(self, other: Guard) -> Guard:
        if not isinstance(other, TensorMatch) or self.spec == other.spec:
            return super().merge(other)
        a, b = self.spec, other.spec
        if attrs.evolve(a, sizes=b.sizes, strides=b.strides) != b:
            return super().merge(other)
        # Same tensor seen static in one place and dynamic in another: keep the stricter.
        sizes = tuple(x if x is not None else y for x, y in zip(a.sizes, b.sizes, strict=True))
        strides = (
            None
            if a.strides is None or b.strides is None
            else tuple(
                x if isinstance(x, int) else y for x, y in zip(a.strides, b.strides, strict=True)
            )
        )
        return attrs.evolve(self, spec=attrs.evolve(a, sizes=sizes, strides=strides))

    def text(self) -> str:
        s = self.spec
        sizes = ", ".join("dyn>=2" if x is None else str(x) for x in s.sizes)
        strides = "" if s.strides is None else ", ".join(_stride_text(x) for x in s.strides)
        layout = "" if s.layout == torch.strided else f" layout={s.layout}"
        keys = ", ".join(str(s.dispatch_keys)[len("DispatchKeySet(") : -1].split(", "))
        return (
            f"TENSOR_MATCH: {self._name()} class={type_name(s.cls)} dtype={s.dtype} "
            f"device={s.device} requires_grad={s.requires_grad} size=[{sizes}] "
            f"stride=[{strides}]{layout} dispatch_keys=[{keys}]"
        )

    def emit(self, var: str, ctx: CodeContext) -> list[str]:
        if ctx.native is not None:
            check = tensor_check(ctx.native, self.spec)
            if check is not None:
                # The same properties, read from the TensorImpl in one C++ call.
                return [f"if not {ctx.bind(check, 'tensor_check')}({var}): return False"]
        return self.emit_python(var, ctx)

    def emit_python(self, var: str, ctx: CodeContext) -> list[str]:
        """The pure-Python statements of ``emit``."""
        s = self.spec
        out = [
            f"if type({var}) is not {ctx.bind(s.cls, 'tensor_type')}: return False",
            f"if {var}.dtype is not {ctx.bind(s.dtype, 'dtype')}: return False",
        ]
        if None not in s.sizes:
            out.append(f"if {var}.size() != {tuple(s.sizes)!r}: return False")
        else:
            size = ctx.temp("size")
            checks = [f"len({size}) != {s.ndim}"]
            for i, n in enumerate(s.sizes):
                checks.append(f"{size}[{i}] < 2" if n is None else f"{size}[{i}] != {n}")
            out.append(f"{size} = {var}.size()")
            out.append(f"if {' or '.join(checks)}: return False")
        if s.strides is None:
            pass  # no strides in this layout; the dispatch keys below pin the layout
        elif all(isinstance(x, int) for x in s.strides):
            out.append(f"if {var}.stride() != {tuple(s.strides)!r}: return False")
        else:
            stride = ctx.temp("stride")
            size = ctx.temp("size") if None not in s.sizes else size
            if None not in s.sizes:
                out.append(f"{size} = {var}.size()")
            out.append(f"{stride} = {var}.stride()")
            checks = []
            for i, x in enumerate(s.strides or ()):
                if isinstance(x, int):
                    checks.append(f"{stride}[{i}] != {x}")
                else:
                    checks.append(f"{stride}[{i}] != {stride}[{x.dim}] * {size}[{x.dim}]")
            out.append(f"if {' or '.join(checks)}: return False")
        out.append(f"if {var}.requires_grad is not {s.requires_grad!r}: return False")
        if s.device_index >= 0:
            # CPU and meta tensors (index -1) are told apart by their backend dispatch key,
            # checked next; only accelerator indices need their own read.
            out.append(f"if {var}.get_device() != {s.device_index}: return False")
        keys = ctx.bind(torch._C._dispatch_keys, "dispatch_keys")
        out.append(f"if {keys}({var}).raw_repr() != {s.dispatch_keys_raw}: return False")
        return out

    def reads_through_override(self) -> bool:
        """Whether Python reads of this tensor would run its class's ``__torch_function__``
        (the check then runs under ``DisableTorchFunctionSubclass``, see check_fn)."""
        return not plain_torch_function(self.spec.cls)

    def _label(self) -> str:
        return f"tensor '{self.source.describe()}'" if self.source is not None else "tensor"

    def explain(
        self, value: object, f_locals: dict[str, object], f_globals: dict[str, Any]
    ) -> str | None:
        s = self.spec
        label = self._label()
        if type(value) is not s.cls:
            want_cls, got_cls = type_name(s.cls), type_name(type(value))
            return f"{label} class mismatch: expected {want_cls}, actual {got_cls}"
        assert isinstance(value, torch.Tensor)
        if value.layout != s.layout:
            return f"{label} layout mismatch: expected {s.layout}, actual {value.layout}"
        problems: list[str] = []
        if value.dtype is not s.dtype:
            problems.append(f"{label} dtype mismatch: expected {s.dtype}, actual {value.dtype}")
        if value.get_device() != s.device_index or value.device.type != s.device.type:
            problems.append(f"{label} device mismatch: expected {s.device}, actual {value.device}")
        if value.requires_grad is not s.requires_grad:
            problems.append(
                f"{label} requires_grad mismatch: expected {s.requires_grad}, "
                f"actual {value.requires_grad}"
            )
        keys = torch._C._dispatch_keys(value)
        if keys.raw_repr() != s.dispatch_keys_raw:
            problems.append(
                f"{label} dispatch keys mismatch: expected {s.dispatch_keys}, actual {keys}"
            )
        size = tuple(value.size())
        stride = tuple(value.stride()) if s.strides is not None else ()
        if len(size) != s.ndim:
            problems.append(f"{label} rank mismatch: expected {s.ndim}, actual {len(size)}")
            return "; ".join(problems)
        for i, n in enumerate(s.sizes):
            if n is None and size[i] < 2:
                problems.append(
                    f"{label} size mismatch at index {i}: expected a dynamic size >= 2, "
                    f"actual {size[i]}"
                )
            elif n is not None and size[i] != n:
                problems.append(
                    f"{label} size mismatch at index {i}: expected {n}, actual {size[i]}"
                )
        for i, x in enumerate(s.strides or ()):
            want = x if isinstance(x, int) else stride[x.dim] * size[x.dim]
            if stride[i] != want:
                how = "" if isinstance(x, int) else f" (= {x})"
                problems.append(
                    f"{label} stride mismatch at index {i}: "
                    f"expected {want}{how}, actual {stride[i]}"
                )
        return "; ".join(problems) or None


