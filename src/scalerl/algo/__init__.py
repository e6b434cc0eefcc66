"""Pure tensor maths of RL for LLMs: losses, aggregation, advantages, log-probs.

Imports only torch. Every function takes scalars and tensors, never a config object.
"""
