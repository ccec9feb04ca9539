"""Graph breaks: from the instruction the VM cannot trace to the resume function.

Follow one break through three files (the modules import nothing from here; use them directly):

1. ``symbolic_vm.interpreter``: ``Interpreter._run()`` catches the handler's ``Unsupported`` and
   returns a ``decisions.Stop`` (the stack and locals before the failed root instruction), or a
   ``decisions.Retrace`` when the instruction had changed the trace; ``capture()`` hands a Stop to
   ``policy.handle_stop``.
2. ``policy``: ``decide(out, vm, stop)`` returns a ``decisions.Decision``: ``Resume`` (break
   there; made by ``plan_crossing``, how each stack value and live local crosses), ``RunRegion``
   (trace again and run a loop/try/with statement, or the statement holding the break, as
   bytecode; ``capture()`` loops on it, at most four traces) or ``RunEagerly``. ``build(...)``
   turns a ``Resume`` into the frame's transformed code.
3. ``resume``: ``ResumeBuilder.residual`` (run the instruction, call ``__resume_at_<offset>_<n>``)
   and ``ResumeBuilder.resume_at`` (each resume function, from the original code).

Beside the path: ``decisions`` (the records), ``flow`` (one cached control-flow analysis per code
object: loops, try and with blocks), ``region`` (a region's residual code), ``slots`` (the records
the builders share: ``BreakPlan``, the stack slots, ``BreakCode``). ``flow``, ``region``,
``resume`` and ``slots`` import no torch.
"""
