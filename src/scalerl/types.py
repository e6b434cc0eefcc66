"""Records shared by every role: the neutral wire-type module.

``rollout/`` produces these and ``pipeline/`` consumes them, and nothing may import
``pipeline/``, so they live here rather than in ``pipeline/types.py`` (see docs/design/root.md).
Only numpy: records cross process and Ray boundaries by pickling.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

FinishReason = Literal["stop", "length", "interrupted"]

INTERRUPTION_PHRASE = (
    "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
)
"""The forced-interruption phrase of the paper's v1 §4 (digest §2.9)."""


@dataclass(frozen=True)
class SamplingParams:
    """How a generation engine samples one batch of completions."""

    max_new_tokens: int = 128
    """Hard cap on generated tokens per completion (thinking + answer); past it -> "length"."""
    temperature: float = 1.0
    """Softmax temperature; 1.0 samples the policy itself, as RL needs."""
    top_p: float = 1.0
    """Nucleus mass; 1.0 disables truncation of the distribution."""
    stop_strings: tuple[str, ...] = ()
    """Decoded text that ends a completion ("stop") besides EOS."""
    interrupt_range: tuple[int, int] | None = None
    """(lo, hi): per sequence, an interruption point drawn uniformly from [lo, hi] thinking
    tokens; None disables forced interruptions (digest §2.9)."""
    answer_budget: int = 32
    """Tokens the model may write after a forced interruption before it is cut ("length")."""
    interruption_phrase: str = INTERRUPTION_PHRASE
    """Text injected at the interruption point; it must end the thinking block."""
    seed: int | None = None
    """Seed for this call's sampling; None draws from the engine's generator."""


@dataclass
class Completion:
    """One sampled completion, with everything the learner needs to score and weight it.

    All per-token arrays have length ``T = len(tokens)`` (the generated part only).
    """

    prompt_tokens: np.ndarray  # (P_len,) int64
    tokens: np.ndarray  # (T,) int64: generated tokens, injected phrase tokens included
    logprobs: np.ndarray  # (T,) float32: behaviour log-prob of each token as sampled
    versions: np.ndarray  # (T,) int64: policy version that produced each token
    loss_mask: np.ndarray  # (T,) bool: False for injected (forced) tokens
    finish_reason: FinishReason
    text: str = ""
    """Decoded completion text (thinking block included)."""
    turns: tuple[Turn, ...] = ()
    """A multi-turn trajectory's spans of ``tokens``, in order: the model's turns and the
    environment's observations (``rollout.multi_turn``); empty for one model turn."""
    kv_versions: np.ndarray | None = None
    """(T,) int64: the oldest policy version among the keys and values each token's sampling
    attended to. After an in-flight swap a running request keeps the KV it computed under the
    old weights (PipelineRL, and what vLLM does), so a token stamped with the new version was
    not sampled wholly under it; a token is *fresh* only when both are the learner's version.
    None: the same as ``versions`` (records written before this field)."""

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def model_turns(self) -> int:
        """Assistant turns in this trajectory (1 for a single-turn completion)."""
        return sum(t.role == "model" for t in self.turns) if self.turns else 1

    @property
    def env_tokens(self) -> int:
        """Tokens the environment appended (observations, ``loss_mask=False``)."""
        return sum(t.end - t.start for t in self.turns if t.role == "env")

    @property
    def observations(self) -> int:
        """Observations the environment answered with: the trajectory's tool calls."""
        return sum(t.role == "env" for t in self.turns)


@dataclass(frozen=True)
class Turn:
    """One span ``tokens[start:end]`` of a trajectory: a model turn (sampled, in the loss) or
    an environment observation (prefilled, ``loss_mask=False``), with its text."""

    role: Literal["model", "env"]
    start: int
    end: int
    text: str


@dataclass
class GeneratorTimes:
    """Where a generator's time went for one group: its share of the chunk's seconds
    (``pipeline.generators.actor``), and wall-clock stamps for the driver's transit time."""

    cpu_s: float = 0.0
    """CPU seconds decoding and scoring."""
    stall_s: float = 0.0
    """Waiting for the weights version the lag policy asks for."""
    swap_s: float = 0.0
    """Reading and loading published weights."""
    idle_s: float = 0.0
    """Waiting for work (``local`` backend): the learner is the bottleneck."""
    eval_cpu_s: float = 0.0
    """CPU seconds of evaluations run since the previous chunk."""
    sent_at: float | None = None
    """Wall clock when the group left its generator."""
    received_at: float | None = None
    """Wall clock when the driver received it."""


@dataclass
class Group:
    """G completions of one prompt, scored: the unit generators stream to the learner."""

    prompt_id: int
    completions: list[Completion]
    rewards: np.ndarray  # (G,) float32, as the task or the user's function returned them; NaN = not scored
    epoch: int = 0
    seq: int = -1
    """The dispatch's sequence number (:class:`PromptAssignment`), matching it to its group."""
    reward_errors: int = 0
    """Samples the task could not grade (each scored 0)."""
    env_errors: int = 0
    """Trajectories an environment's exception ended (each scored 0)."""
    start_version: int = -1
    """Weights version the generator held when it started this group (the group's version
    when no trajectory has a token, e.g. every environment failed at ``reset``)."""
    times: GeneratorTimes = field(default_factory=GeneratorTimes)
    reward_parts: dict[str, np.ndarray] = field(default_factory=dict)
    """Each user reward function's own (G,) float32 rewards by name (``task.reward_fns``),
    raw (not in the configured form), NaN where it returned None; empty otherwise."""
    reward_part_errors: dict[str, int] = field(default_factory=dict)
    """Samples each user reward function failed on, by name (``reward_errors`` counts the
    samples any of them failed on); empty when the task or an environment scores."""

    def __setstate__(self, state: dict) -> None:
        """Unpickle, a group from a checkpoint written before the typed fields included: its
        ``meta`` dict (``seq``, ``reward_errors``, ``gen_*_s``, ``sent_at``, ``received_at``)
        becomes the fields, so such a run still resumes; one written before ``reward_parts``
        gets none, and one written before ``reward_part_errors`` none of those."""
        state.setdefault("reward_parts", {})
        state.setdefault("reward_part_errors", {})
        meta = state.pop("meta", None)
        if meta is not None:
            names = {f.name for f in fields(GeneratorTimes)}
            times = {k.removeprefix("gen_"): v for k, v in meta.items() if k.removeprefix("gen_") in names}
            state = {"seq": meta.get("seq", -1), "reward_errors": meta.get("reward_errors", 0),
                     "env_errors": 0, "start_version": -1, "times": GeneratorTimes(**times)} | state
        self.__dict__.update(state)

    @property
    def oldest_version(self) -> int:
        """Oldest policy version that contributed a token to this group (its staleness is the
        learner's version less this). Not :attr:`PromptAssignment.min_version`, the version a
        generator must hold before it starts decoding."""
        return min((int(c.versions.min()) for c in self.completions if c.num_tokens), default=self.start_version)


# --- pipeline messages (scalerl.pipeline roles; any backend carries them by pickling) ---------


@dataclass(frozen=True)
class PromptAssignment:
    """One training prompt dispatched to a generator: decode G completions of it."""

    seq: int
    """Dispatch sequence number, unique in a run: matches the returned group to its dispatch."""
    prompt_id: int
    """Index into the task's training prompts."""
    epoch: int
    """Curriculum epoch the prompt was drawn in."""
    min_version: int
    """The generator must hold weights at least this new before it starts decoding."""


@dataclass(frozen=True)
class EvalRequest:
    """Evaluate the policy of ``version`` (the weights after learner step ``step``) on a
    generator (``eval.on=generator``, ``scalerl.pipeline.evaluation``)."""

    step: int
    version: int
    weights: object
    """The learner's parameters at that version, flat float32 in ``WeightLayout`` order (a
    torch tensor, moved through shared memory by ``torch.multiprocessing``)."""


@dataclass(frozen=True)
class EvalResult:
    """What an evaluation measured, sent back to the driver."""

    step: int
    version: int
    metrics: dict
    """``<prefix>_pass_rate``, ``<prefix>_stderr``, ... of every evaluator (``scalerl.eval``)."""
    tokens: int
    """Prefill + decoded tokens, counted as generation compute."""
    seconds: float
    """Wall time the evaluation took on its role."""
    pid: int
    """The process that ran it."""
    samples: tuple = ()
    """A few ``{prompt, completion, reward, finish_reason, evaluator}`` of it (``samples.jsonl``)."""
