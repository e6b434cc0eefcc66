"""The learner role: the role's protocol and the single-process learner (``role``), its ranks
(``rank``) as spawned processes or Ray actors (``group``, ``ray_ranks``), and the step it
takes: the rules built once (``rules``), the pure batch (``batch``), packing and the
train step (``packing``, ``train_step``). Never imports ``pipeline.generators``."""
