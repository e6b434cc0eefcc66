"""Time to target: the hours a run's reads take to reach a target, and how to split the
machine so it gets there sooner. The forecast itself is ``fit.forecast``; this is the clock
and the devices.

- ``timing``: the run's clock (compute -> hours, from its records or given speeds);
- ``throughput``: the PipelineRL-k model of a step's time from the roles' measured costs, behind
  the split advice;
(``scalerl plan``'s answer, a ``Forecast``'s reach of a target with the splits, is the command's:
``fit.commands.plan_answer``.)

Like the rest of ``fit/``: numpy and scipy only, never torch or the trainer.
"""
