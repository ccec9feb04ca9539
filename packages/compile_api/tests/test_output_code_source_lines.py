"""inductor_lite's generated code names the user's source lines, as torch's output_code does:
``# File: model.py:LINE in fn, code: ...`` above each call of the wrapper and above each fused
kernel, in the ``output_code`` log channel and in the STRATA_COMPILE_DEBUG dumps."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import compile_api
from inductor_lite.ir import Origin
from inductor_lite.origins import annotate_kernels, comment_lines, source_line

# the interpreter must be chosen before triton is first imported (see the root conftest.py)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        z = torch.relu(y) * 2
        return z.softmax(-1) + x.sum()


def _line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(_Block.forward)
    return first + next(k for k, line in enumerate(lines) if text in line)


def _file_comment(code: str) -> str:
    return f"File: {__file__}:{_line_of(code)} in forward, code: {code}"


@pytest.fixture
def output_code(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    compile_api.set_logs(output_code=True)
    try:
        with caplog.at_level(logging.DEBUG, logger="strata.output_code"):
            yield caplog
    finally:
        compile_api.set_logs(output_code=False)


def _kernels_and_wrapper(text: str) -> tuple[str, str]:
    kernels, wrapper = text.split("# ---- wrapper (Python) ----")
    return kernels, wrapper


def test_cpp_kernels_and_the_wrapper_carry_the_users_source_lines(
    output_code: pytest.LogCaptureFixture,
) -> None:
    torch.manual_seed(0)
    block = _Block()
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = compile_api.compile(block, backend="inductor")(x)
        torch.testing.assert_close(out, block(x))
    kernels, wrapper = _kernels_and_wrapper(output_code.text)
    softmax = _file_comment("return z.softmax(-1) + x.sum()")
    relu = _file_comment("z = torch.relu(y) * 2")
    linear = _file_comment("y = self.lin(x)")
    # every kernel has its comment block right above its definition
    lines = kernels.splitlines()
    above: dict[str, list[str]] = {}
    for k, line in enumerate(lines):
        if line.startswith('extern "C" void kernel'):
            j = k
            while lines[j - 1].startswith(("// Source nodes: [", "// File: ")):
                j -= 1
            above[line] = lines[j:k]
    assert above and all(block and "Original ATen: [aten." in block[0] for block in above.values())
    shown = [c for block in above.values() for c in block]
    assert f"// {relu}" in shown and f"// {softmax}" in shown
    # the wrapper: the aten matmul of the linear layer, and each kernel call
    assert f"    # {linear}" in wrapper
    assert f"    # {softmax}" in wrapper
    calls = [line for line in wrapper.splitlines() if line.lstrip().startswith("_kernel")]
    assert calls
    for call in calls:
        before = wrapper.split(call)[0].rstrip().splitlines()
        assert any(line.lstrip().startswith("# File: ") for line in before[-4:]), before[-4:]


def test_the_debug_dump_of_the_output_code_carries_the_source_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_COMPILE_DEBUG_DIR", str(tmp_path))
    compile_api.config.compile_debug = True
    block = _Block()
    x = torch.randn(4, 8, requires_grad=True)
    out = compile_api.compile(block, backend="inductor")(x)
    torch.testing.assert_close(out, block(x))
    out.sum().backward()  # the backward graph's code too
    dumps = sorted((tmp_path / "strata_compile_debug").rglob("output_code_*.py"))
    assert len(dumps) == 2, dumps  # forward and backward
    for dump in dumps:
        code = dump.read_text()
        assert f"// {_file_comment('z = torch.relu(y) * 2')}" in code
        assert f"    # {_file_comment('y = self.lin(x)')}" in code


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.sigmoid(x * 2 + y)
    return a.exp() / 3


def test_triton_kernels_carry_the_users_source_lines(
    output_code: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = torch.randn(33, 70, device=dev), torch.randn(70, device=dev)
    fn = compile_api.compile(
        _pointwise, backend="inductor", options={"codegen": "triton", "triton_autotune_cache": {}}
    )
    torch.testing.assert_close(fn(x, y), _pointwise(x, y))
    kernels, wrapper = _kernels_and_wrapper(output_code.text)
    first = inspect.getsourcelines(_pointwise)[1]
    line_a = f"File: {__file__}:{first + 1} in _pointwise, code: a = torch.sigmoid(x * 2 + y)"
    line_b = f"File: {__file__}:{first + 2} in _pointwise, code: return a.exp() / 3"
    head = kernels.split("@triton.jit")[0]  # the comments sit above the decorator
    assert f"# {line_a}" in head and f"# {line_b}" in head
    assert f"    # {line_a}" in wrapper


def test_a_source_line_is_the_innermost_frame_of_the_stack_trace() -> None:
    trace = (
        '  File "/m/train.py", line 40, in main\n    loss = model(x)\n'
        '  File "/m/model.py", line 14, in forward\n    return x + 1\n'
    )
    assert source_line(trace) == "File: /m/model.py:14 in forward, code: return x + 1"
    assert source_line(None) == "" and source_line("no frames") == ""


def test_comments_list_each_source_line_once_and_go_above_their_kernel() -> None:
    origins = {
        "buf0": (Origin("mul", "aten.mul.Tensor", "File: m.py:3 in f, code: y = x * 2"),),
        "buf1": (
            Origin("mul", "aten.mul.Tensor", "File: m.py:3 in f, code: y = x * 2"),
            Origin("add", "aten.add.Tensor", "File: m.py:3 in f, code: y = x * 2"),
            Origin("sum", "aten.sum.default", ""),
        ),
    }
    assert comment_lines(origins, ["buf0", "buf1"], "// ") == [
        "// Source nodes: [mul, add, sum], Original ATen: [aten.mul.Tensor, aten.add.Tensor, "
        "aten.sum.default]",
        "// File: m.py:3 in f, code: y = x * 2",
    ]
    assert comment_lines(origins, ["buf9"], "# ") == []

    class _Step:
        def __init__(self, buf: str) -> None:
            self.node = type("N", (), {"buf": buf})()

    class _Kernel:
        def __init__(self, name: str, buf: str) -> None:
            self.name, self.steps = name, (_Step(buf),)

    source = "import triton\n\n@triton.jit\ndef kernel0(p):\n    pass\n\nkernel1 = kernel0\n"
    shown = annotate_kernels(
        source, [_Kernel("kernel0", "buf0"), _Kernel("kernel1", "buf1")], origins, triton=True
    )
    assert shown.split("\n")[2:6] == [
        "# Source nodes: [mul], Original ATen: [aten.mul.Tensor]",
        "# File: m.py:3 in f, code: y = x * 2",
        "@triton.jit",
        "def kernel0(p):",
    ]
    assert shown.rstrip().endswith("# File: m.py:3 in f, code: y = x * 2\nkernel1 = kernel0")
