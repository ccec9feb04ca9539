"""``re``: matching constant strings against constant patterns, folded while tracing.

Library code asks regular expressions about configuration strings on every forward
(transformers' ``is_flash_attention_requested(config, version=...)`` calls ``re.match`` on the
attention implementation's name). Traced line by line, ``re._compile`` indexes its cache by a
``(type, pattern, flags)`` tuple, which breaks the graph. With every argument a constant
string, bytes, int or flag, these functions are pure (the module cache changes no answer), so
the call runs while tracing and its result (a ``re.Match``, a ``Pattern``, a string, a list of
strings, or None) is a constant of the trace. A callable ``repl`` or any traced value leaves
the call to the VM's other rules.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from symbolic_vm.builtin_table import BuiltinImpl, implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.values import ConstVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

_PURE = (re.match, re.search, re.fullmatch, re.compile, re.escape, re.sub, re.subn, re.split,
         re.findall)


def _argument(vm: Interpreter, var: Var) -> object:
    if isinstance(var, ConstVar) and isinstance(var.value, (str, bytes, int)):
        vm.out.depend(var)
        return var.value
    raise Unsupported("a re function with an argument that is not a constant string or int")


def _folded(fn: object) -> BuiltinImpl:
    def run(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
        py_args = [_argument(vm, a) for a in args]
        py_kwargs = {k: _argument(vm, v) for k, v in kwargs.items()}
        try:
            value = fn(*py_args, **py_kwargs)  # type: ignore[operator]
        except (re.error, TypeError, ValueError) as exc:
            raise throw(type(exc), *exc.args) from exc
        return vm.out.wrap(value, None)

    return run


for _fn in _PURE:
    implements(_fn)(_folded(_fn))
