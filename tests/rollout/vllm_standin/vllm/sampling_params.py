"""``vllm.sampling_params`` of the stand-in: the output kinds a request can ask for."""

from __future__ import annotations

import enum


class RequestOutputKind(enum.IntEnum):
    CUMULATIVE = 0  # every output repeats all tokens so far (vLLM's default)
    DELTA = 1  # every output carries only the tokens new since the last one
    FINAL_ONLY = 2
