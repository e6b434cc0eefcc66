"""scalerl: predictable reinforcement learning for language models.

Two halves (see docs/design/index.md): ``scalerl.fit`` forecasts RL runs with the ScaleRL
sigmoid law, and the trainer (``scalerl.pipeline``) runs the ScaleRL recipe.
"""

__version__ = "0.1.0"
