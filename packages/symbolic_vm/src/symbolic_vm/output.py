"""What one capture accumulates: its graph inputs and guard plan (graph_inputs, guard_plan),
the side-effect log (side_effects' records), the names the trace rebinds, and the helper
globals the transformed code needs (installs)."""

from __future__ import annotations

from typing import Any

from symbolic_vm.constant_values import CONSTANT_TYPES, MadeObjectId, is_constant_value
from symbolic_vm.guard_plan import GuardPlan
from symbolic_vm.guard_requests import GuardRequest
from symbolic_vm.raising_ops import may_raise_on_data
from symbolic_vm.records import CaptureConfig
from symbolic_vm.side_effects import (
    AttrDelete,
    AttrWrite,
    CellWrite,
    ContainerWrite,
    DictSubclassWrite,
    GlobalWrite,
    HookRegistration,
    SideEffect,
    replace_dict_items,
)
from symbolic_vm.values import Var

# Names other modules imported from here before the split; they live in the modules above.
__all__ = [
    "CONSTANT_TYPES",
    "AttrDelete",
    "AttrWrite",
    "CellWrite",
    "ContainerWrite",
    "DictSubclassWrite",
    "GlobalWrite",
    "GuardRequest",
    "HookRegistration",
    "MadeObjectId",
    "Output",
    "SideEffect",
    "is_constant_value",
    "replace_dict_items",
]


class Output(GuardPlan):
    """The state shared by the root frame and every inlined call of one capture."""

    def __init__(
        self, f_globals: dict[str, Any], config: CaptureConfig, *, prefix: str = "__strata"
    ) -> None:
        super().__init__(config)
        self.prefix = prefix
        self.f_globals = f_globals
        self.inlined_calls = 0  # user code run symbolically (it may have changed anything)
        self.side_effects: list[SideEffect] = []
        # Attribute writes on real objects, seen by later reads in the same trace.
        self.attr_overlay: dict[tuple[int, str], Var] = {}
        self.global_overlay: dict[str, Var] = {}  # globals rebound by the trace
        # (id(dict), id(tensor key)) -> (the key, the value): tensor_key_stores
        self.tensor_key_overlay: dict[tuple[int, int], tuple[object, Var]] = {}
        # Autocast modes entered in the tracer and not yet left (left if the capture fails).
        self.cleanups: list[Any] = []
        self._installs: dict[str, object] = {}
        self._install_ids: dict[int, str] = {}
        self.graph_index = 0
        # Names local to the transformed code (arguments, free and cell variables): a global
        # by one of these names is read there through the globals dict (codegen.Rebuilder).
        self.frame_names: frozenset[str] = frozenset()
        # User context managers entered in the trace: id(the __exit__ var BEFORE_WITH pushed)
        # -> (that var, how many graph nodes there were when its block began). Ops made after
        # that are in its block (raising_ops: a block that may raise runs as bytecode).
        self.with_entries: dict[int, tuple[Var, int]] = {}

    def block_may_raise(self, exit_var: Var) -> bool:
        """Whether the graph ops made in the with block whose ``__exit__`` is ``exit_var`` (a
        user manager entered in this trace) may raise at run time on tensor data: eager would
        then call that ``__exit__`` with the error, which the transformed code cannot."""
        entry = self.with_entries.get(id(exit_var))
        if entry is None or entry[0] is not exit_var:
            return False
        nodes = list(self.builder.graph.nodes)[entry[1]:]
        return may_raise_on_data(nodes)

    def change_marks(self) -> tuple[int, ...]:
        """Counters that move when the trace changes what a graph break could not undo.

        A failing root-level handler either inlines user code (counted), adds graph nodes or
        effects (counted), or fails before it writes anything: every VM method that writes a
        list/dict/object/cell reads and checks its operands first.
        """
        return (len(self.builder.graph.nodes), len(self.side_effects), self.inlined_calls)

    # -- helper globals ---------------------------------------------------------------------

    def install(self, value: object, stem: str = "const") -> str:
        """A global name the transformed code can use to reach ``value``."""
        known = self._install_ids.get(id(value))
        if known is not None:
            return known
        name = f"{self.prefix}_{stem}_{len(self._installs)}"
        self._installs[name] = value
        self._install_ids[id(value)] = name
        return name

    @property
    def installs(self) -> dict[str, object]:
        """Helper globals the transformed code needs."""
        return dict(self._installs)
