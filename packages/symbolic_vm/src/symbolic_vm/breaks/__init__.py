"""Graph breaks: from the instruction the VM cannot trace to the resume function.

Follow one break in this order (the modules import nothing from here; use them directly):

1. ``symbolic_vm.interpreter``: ``Interpreter.run_frame()`` returns a ``decisions.Stop`` (the
   stack and locals before the failed root instruction) or a ``decisions.Retrace``.
2. ``policy.decide(out, vm, stop)`` returns a ``decisions.Decision``: ``Resume`` (break there),
   ``RunRegion`` (trace again and run a loop/try/with statement, or the statement holding the
   break, as bytecode) or ``RunEagerly``. It asks ``flow`` (one cached control-flow analysis per
   code object: loops, try and with blocks) and ``crossing.plan_crossing`` (how each stack value
   and live local crosses the break). ``symbolic_vm.frame_capture.capture()`` loops on the
   decisions (at most four traces).
3. ``policy.build(...)`` turns a ``Resume`` into the frame's transformed code:
   ``resume.ResumeBuilder.residual`` (run the instruction, call ``__resume_at_<offset>_<n>``) or,
   at a region's start, ``region.region_residual``; ``resume.ResumeBuilder.resume_at`` builds
   each resume function from the original code. ``slots`` holds the records they share
   (``BreakPlan``, the stack slots, ``BreakCode``).

``flow``, ``region``, ``resume`` and ``slots`` import no torch.
"""
