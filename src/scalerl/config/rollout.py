"""The rollout side of the config: length control, the generator engine (and vLLM's options)
and sampling (sections ``length``, ``rollout``, ``sampling``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from scalerl.config.base import Frozen as _Frozen


class LengthConfig(_Frozen):
    """Length control (digest §2.9): forced interruptions, the A.10 length penalty, or none."""

    control: Literal["interrupt", "penalty", "none"] = "interrupt"
    """``interrupt`` injects the end-of-thinking phrase at a random point; ``penalty`` adds
    Eq. 9's ``clip((L_max − |y|)/L_cache − 1, −1, 0)`` to correct traces (loo-lp)."""
    interrupt_range: tuple[int, int] = (34, 40)
    """Per sequence, the interruption point is drawn uniformly from these thinking-token counts
    (the paper's 10k–12k of a 12k thinking budget, scaled to the tiny task: its correct
    thinking blocks are at most 28 tokens)."""
    answer_budget: int = Field(6, ge=1)
    """Tokens allowed after a forced interruption before the completion is cut."""
    penalty_max_len: int = Field(40, ge=1)
    """L_max of the length penalty, in completion tokens (paper: 14k)."""
    penalty_cache: int = Field(8, ge=1)
    """L_cache of the length penalty (paper: 2k): the penalty ramps over the last L_cache."""
    truncation: Literal["drop", "mask", "keep"] = "keep"
    """Completions cut by ``max_new_tokens`` (``filters.truncation_masks``): ``drop`` removes
    them from statistics and loss (the digest's A.15 reading), ``mask`` keeps them in the group
    statistics only, ``keep`` treats them as ordinary samples. Default ``keep`` (with
    ``truncation_is_failure``): interruptions bound only the thinking block, so a tiny model can
    still ramble after ``</think>``; dropping those samples removed the only pressure against
    never-ending answers and our runs collapsed into truncation (the paper's A.15 warning)."""
    truncation_is_failure: bool | Literal["auto"] = "auto"
    """Train on a completion cut by ``sampling.max_new_tokens`` as a failure (reward 0 before
    ``task.reward``'s transform, so −1 under ``pm1``) whatever its reward: it never finished its
    answer. ``auto``: on for the built-in verifiable tasks (the paper's rule), off for a user's
    reward, which is trained on as returned (TRL scores truncated completions normally too).
    Only the trained reward changes: ``reward_mean`` and the pass rates use the reward as
    returned."""


PARALLEL_OPTIONS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                    "distributed_executor_backend")
"""``vllm.LLM`` options that spread one engine over processes (``gpu-review-2.md`` N10)."""


class VLLMConfig(_Frozen):
    """``vllm.LLM`` options of a ``rollout.engine=vllm`` generator."""

    gpu_memory_utilization: float = Field(0.4, gt=0, le=1)
    """Share of the GPU's memory vLLM takes for weights and KV cache. vLLM's own 0.9 would
    leave a learner on the same GPU almost nothing; give a generator alone on its GPU 0.9."""
    enforce_eager: bool = False
    """Skip CUDA-graph capture: a faster start and a slower decode."""
    kv_cache_memory_bytes: int | None = Field(None, ge=1)
    """Bytes of KV cache vLLM allocates, skipping its profiling (which assumes it is alone on
    the GPU: a learner allocating meanwhile shrinks the cache or trips its check). None: vLLM
    sizes the cache from ``gpu_memory_utilization``."""
    extra: dict[str, Any] = {}
    """Further ``vllm.LLM`` keyword arguments, passed as given (e.g. ``max_model_len``); not
    the ones the trainer sets itself from the rest of the config (``model``, ``dtype``,
    ``seed``), nor those named here."""

    @model_validator(mode="after")
    def _extra_is_extra(self) -> VLLMConfig:
        taken = sorted(set(self.extra) & {"model", "dtype", "seed", "version", "fp32_head",
                                          "gpu_memory_utilization", "enforce_eager", "logprobs_mode",
                                          "kv_cache_memory_bytes",
                                          "async_scheduling"})
        if "head_dtype" in (self.extra.get("hf_overrides") or {}):
            taken.append("hf_overrides.head_dtype")
        parallel = sorted(k for k in PARALLEL_OPTIONS if k in self.extra and self.extra[k] not in (None, 1))
        if parallel:
            raise ValueError(f"rollout.vllm.extra cannot set {', '.join(parallel)}: a vLLM spread over several "
                             "devices runs its workers in child processes, which a generator (a daemonic process) "
                             "cannot start and where weight loads cannot land between engine steps; run more "
                             "generators (pipeline.num_generators) instead")
        if taken:
            raise ValueError(f"rollout.vllm.extra cannot set {', '.join(taken)}: the trainer sets "
                             "them (model.base, model.dtype, train.seed, model.fp32_head_generator, rollout.vllm's "
                             "own fields, or the behaviour log-probs and step semantics the trainer relies on)")
        return self

    def llm_kwargs(self) -> dict[str, Any]:
        sized = {} if self.kv_cache_memory_bytes is None else {"kv_cache_memory_bytes": self.kv_cache_memory_bytes}
        return {"gpu_memory_utilization": self.gpu_memory_utilization,
                "enforce_eager": self.enforce_eager, **sized, **self.extra}


class RolloutConfig(_Frozen):
    engine: Literal["torch", "vllm"] = "torch"
    """Generation engine of every generator: ``torch`` (``rollout.torch_engine``, CPU or one
    GPU; the faster on CPUs) or ``vllm`` (``rollout.vllm_engine``: the optional ``vllm`` extra
    on GPUs, or vLLM's CPU build, which ``make test`` installs and the tests run)."""
    vllm: VLLMConfig = VLLMConfig()
    """Options of the ``vllm`` engine (ignored by ``torch``)."""


class SamplingConfig(_Frozen):
    max_new_tokens: int = Field(66, ge=1)
    """Hard cap on generated tokens per completion; beyond it the completion is truncated."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature for training rollouts (the paper gives none; 1.0 samples π)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass for training rollouts."""
