"""The ``strata.kernel_choices`` log channel: what inductor_lite chose where it had a choice.

One DEBUG line per decision -- a convolution's layout (by rule or timed), its epilogue folded
or not, a reduction left to aten, an op kept as aten's kernel instead of its decomposition --
with the numbers the decision was made on. ``compile_api.set_logs(kernel_choices=True)`` or
``STRATA_LOGS=kernel_choices`` turns it on.
"""

from __future__ import annotations

import logging

__all__ = ["choice"]

_log = logging.getLogger("strata.kernel_choices")


def choice(what: str, chosen: str, why: str, *args: object) -> None:
    """Log that ``what`` got ``chosen`` because ``why % args``."""
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("%s: %s (%s)", what, chosen, why % args if args else why)
