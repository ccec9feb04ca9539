"""Models of the standard library, one module per library (``copy_``, ``itertools_``,
``functools_``, ``operator_``, ``collections_``, ``misc``, ``re_``).

Each module registers its functions in builtin_table's ``@implements`` table, either as an
implementation on tracked values (``copy.deepcopy``) or as a *polyfill*: a plain Python function
the VM inlines like user code in place of the C function (``itertools.chain``), registered with
``polyfill(real)``. Importing this package registers them all (stdlib_calls imports it).
"""

from __future__ import annotations

from symbolic_vm.stdlib import (  # noqa: F401
    class_getitem,
    collections_,
    copy_,
    deque_,
    functools_,
    itertools_,
    mappingproxy,
    misc,
    operator_,
    re_,
)

__all__: list[str] = []
