"""The generator role: G scored trajectories per assigned prompt, emitted as groups.

Digest §4.3. For each chunk of :class:`PromptAssignment` the actor first waits until it holds
weights at least as new as the assignment asks (``min_version``: the sync and
PPO-off-policy rounds start from the learner's latest policy), then hands all P_chunk
examples to its rollout (``scalerl.rollout.rollout``: one engine call for every P_chunk × G
completion, or one per turn with an environment); the rewards leave as returned (the
learner's ``pipeline.learner.batch`` decides what it trains on). Between decode steps the engine calls ``on_step``; the actor
polls its :class:`WeightSource` there and, if the learner published, swaps the weights in
flight (PipelineRL: the KV cache of sequences in flight is kept). Every token records the
version that sampled it, so the learner can measure staleness per token.

Where the role's time goes rides on each group's ``times`` (:class:`~scalerl.types.GeneratorTimes`,
shared evenly by the groups of a chunk).

An :class:`~scalerl.types.EvalRequest` (``eval.on=generator``) is served between chunks: the
engine loads the request's weights, runs the spec's evaluators, and goes back to the latest
published version before it decodes again.

The class is backend-agnostic: the ``local`` backend runs it in a spawned process, the Ray
backend in an actor, the in-process backend directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from scalerl.algo.logprobs import FP32_HEAD
from scalerl.data.tasks.spec import TaskSpec
from scalerl.eval import build_evaluators, evaluate
from scalerl.models.chat import ChatFormat
from scalerl.models.lora import LoraSpec
from scalerl.rollout.env import EnvSpec
from scalerl.rollout.rollout import build_rollout
from scalerl.types import (
    EvalRequest,
    EvalResult,
    GeneratorTimes,
    Group,
    PromptAssignment,
    SamplingParams,
)


class Actor:
    def __init__(self, engine, tokenizer, task, params: SamplingParams, generations: int,
                 weights=None, orphaned=None, evals=(), chat: ChatFormat | None = None,
                 adapter=None, env: EnvSpec | None = None) -> None:
        self.engine, self.tokenizer, self.task = engine, tokenizer, task
        # generation and scoring: one turn per trajectory, or an environment's turns (env)
        self.rollout = build_rollout(task, tokenizer, chat or ChatFormat(), env)
        # with LoRA, published versions are adapters: merged into the engine's base weights
        self.adapter = adapter
        self.params, self.generations = params, generations
        self.weights = weights  # a WeightSource, or None for a frozen policy
        self.swaps = 0  # in-flight weight swaps done inside a generate call
        self.swap_s = 0.0  # seconds reading + loading weights since the last chunk
        self.orphaned = orphaned or (lambda: False)  # the backend's "the learner is gone" test
        # built with the role, so a first evaluation does not pay for the evaluation sets
        self._evaluators = build_evaluators(evals, engine, tokenizer) if evals else []

    def poll_weights(self, engine=None, step: int = 0) -> None:
        """``on_step`` hook: load newer published weights, if any, into the engine."""
        if self.weights is None:
            return
        start = time.perf_counter()
        fresh = self.weights.read(self.engine.version)
        if fresh is not None:
            self.load(*fresh)
            self.swaps += step > 0
            self.swap_s += time.perf_counter() - start

    def wait_for_version(self, version: int, timeout: float = 600.0) -> None:
        """Block until the engine holds weights of at least ``version``."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll_weights()
            if self.engine.version >= version:
                return
            if time.monotonic() > deadline or self.orphaned():
                raise TimeoutError(f"generator never received weights version {version}")
            time.sleep(0.005)

    def load(self, version: int, state) -> None:
        """Load a published version into the engine (merged with the base under LoRA)."""
        self.engine.update_weights(self.adapter(state) if self.adapter is not None else state, version)

    def run_batch(self, assignments: list[PromptAssignment]) -> list[Group]:
        """G scored trajectories for each assignment, by the rollout; one :class:`Group` each."""
        if not assignments:
            return []
        stall = time.perf_counter()
        self.wait_for_version(max(a.min_version for a in assignments))
        stall = time.perf_counter() - stall
        start, version = time.process_time(), self.engine.version  # this role's CPU seconds (pipeline/overlap.py)
        examples = [self.task.train_example(a.prompt_id) for a in assignments]
        scored = self.rollout.run(self.engine, examples, self.generations, self.params, on_step=self.poll_weights)
        groups = [Group(a.prompt_id, t.completions, t.rewards.astype(np.float32), a.epoch,
                        seq=a.seq, reward_errors=t.reward_errors, env_errors=t.env_errors, start_version=version,
                        reward_parts=t.reward_parts,  # each reward function's own rewards
                        reward_part_errors=t.reward_part_errors)  # and the samples it failed on
                  for a, t in zip(assignments, scored)]
        n, sent = len(groups), time.time()
        cpu, swap, self.swap_s = time.process_time() - start, self.swap_s, 0.0
        for g in groups:
            g.times = GeneratorTimes(cpu_s=cpu / n, stall_s=stall / n, swap_s=swap / n, sent_at=sent)
        return groups

    def evaluate(self, request: EvalRequest, unflatten) -> EvalResult:
        """Run the spec's evaluators on the request's weights (``unflatten``: flat tensor ->
        state dict), then load the latest published weights back."""
        self.load(request.version, unflatten(request.weights))
        result = evaluate(self._evaluators, request.step, request.version)
        # back to the latest *published* weights: the request's may be newer than what the
        # lag policy lets this generator sample with (e.g. mid-round in ppo-off-policy)
        latest = self.weights.read(-1) if self.weights is not None else None
        if latest is not None:
            self.load(*latest)
        return result


ENGINES = ("torch", "vllm")
"""Generation engines a generator can run (``rollout.engine``)."""


@dataclass(frozen=True)
class ActorSpec:
    """Everything a fresh process needs to build an :class:`Actor` (picklable).

    A backend builds every generator from a spec and an index alone (:func:`build_actor`);
    what differs between backends (the weight channel, the orphan test) is passed in, never
    patched onto the actor afterwards.
    """

    model_dir: str
    """HF model directory holding the starting weights and the tokenizer (later versions come
    through the backend's weight source)."""
    task: TaskSpec
    chat: ChatFormat = ChatFormat()
    """How prompts are rendered (the model's chat template, or plain text)."""
    lora: LoraSpec | None = None
    """With LoRA, versions arrive as adapters and are merged into the base weights."""
    params: SamplingParams = SamplingParams()
    generations: int = 8
    engine: str = "torch"
    """``torch`` (:class:`~scalerl.rollout.torch_engine.TorchEngine`) or ``vllm``."""
    engine_kwargs: dict = field(default_factory=dict)
    """Further keyword arguments of the engine: ``vllm.LLM``'s options (``rollout.vllm``)."""
    device: str = "cpu"
    """Where the engine decodes: ``cpu`` or ``cuda`` (``cuda:N``)."""
    dtype: str = "float32"
    """Parameter dtype of the model body."""
    fp32_head: bool = FP32_HEAD
    """LM head (and its softmax) in float32."""
    seed: int = 0
    """Base seed; generator ``index`` samples with :meth:`seed_for` so generators differ."""
    threads: int = 1
    evals: tuple = ()
    """:class:`~scalerl.eval.EvalSpec` s this generator runs on an ``EvalRequest``."""
    env: EnvSpec | None = None
    """The environment every trajectory runs in (``env.name``); None: single-turn."""

    def seed_for(self, index: int) -> int:
        """Sampling seed of generator ``index``: ``seed + 7919·index`` (a prime stride)."""
        return self.seed + 7919 * index


def build_engine(spec: ActorSpec, index: int = 0):
    """The generation engine named by ``spec`` with the starting weights (version −1: every
    backend publishes version 0 or later before a generator decodes), and its tokenizer."""
    if spec.engine == "vllm":
        from scalerl.rollout.vllm_engine import VLLMEngine

        engine = VLLMEngine(spec.model_dir, fp32_head=spec.fp32_head, dtype=spec.dtype,
                            seed=spec.seed_for(index), version=-1, **spec.engine_kwargs)  # vLLM places itself
        return engine, engine.tokenizer
    if spec.engine != "torch":
        raise ValueError(f"unknown engine {spec.engine!r}; valid: {', '.join(ENGINES)}")
    from scalerl.models import load_pretrained
    from scalerl.rollout.torch_engine import engine_for

    model, tokenizer = load_pretrained(spec.model_dir, spec.dtype)
    engine = engine_for(model, tokenizer, fp32_head=spec.fp32_head, device=spec.device,
                        seed=spec.seed_for(index), version=-1)
    return engine, tokenizer


def build_actor(spec: ActorSpec, weights=None, index: int = 0, orphaned=None) -> Actor:
    """Generator ``index`` of ``spec``, polling ``weights`` (a WeightSource) for new versions."""

    engine, tokenizer = build_engine(spec, index)
    adapter = None
    if spec.lora is not None:
        from scalerl.models.load import resolve_dtype
        from scalerl.models.lora import AdapterMerger, base_weights

        dtype = resolve_dtype(spec.dtype)
        adapter = AdapterMerger(base_weights(spec.model_dir, spec.lora.targets, dtype), spec.lora, dtype)
    return Actor(engine, tokenizer, spec.task.build(), spec.params, spec.generations, weights,
                 orphaned=orphaned, evals=spec.evals, chat=spec.chat, adapter=adapter, env=spec.env)
