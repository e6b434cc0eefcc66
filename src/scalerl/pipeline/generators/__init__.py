"""The generator role: the actor that turns prompts into groups (``actor``), and the
transports that run it beside the learner (``inprocess``), as processes on this machine
(``local``) or as actors on a Ray cluster (``ray``), each a ``pipeline.backends`` entry.
Never imports ``pipeline.learner``."""
