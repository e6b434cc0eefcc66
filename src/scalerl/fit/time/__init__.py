"""Time to target: how many hours until a run's reads reach a target, and how to split the
machine so it gets there sooner.

- ``crossing``: the compute at which each draw of the predictive distribution
  (``scalerl.fit.predictive``) first reads at or above the target;
- ``timing``: the run's clock (compute -> hours, from its records or given speeds) and
  ``time_to_target``;
- ``throughput``: the PipelineRL-k model of a step's time from the roles' measured costs, behind
  the split advice;
- ``answer``: the answer ``scalerl plan`` prints and the live forecast shows (``make_plan``,
  ``live_time_to_target``);
- ``cli``: the ``scalerl plan`` command; ``plot``: its figure.

Like the rest of ``fit/``: numpy and scipy only, never torch or the trainer.
"""
