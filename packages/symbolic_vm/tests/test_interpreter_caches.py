"""The interpreter's per-code caches hold no code object alive after its function is gone."""

from __future__ import annotations

import gc
import weakref

from symbolic_vm.interpreter import _exception_table


def test_an_exception_table_is_released_with_its_code_object() -> None:
    namespace: dict[str, object] = {}
    source = "def f(x):\n    try:\n        return x + 1\n    except TypeError:\n        return 0\n"
    exec(source, namespace)
    code = namespace.pop("f").__code__  # type: ignore[attr-defined]
    entries = _exception_table(code)
    assert entries and _exception_table(code) is entries  # made once, then cached
    alive = weakref.ref(code)
    del code, entries
    gc.collect()
    assert alive() is None
