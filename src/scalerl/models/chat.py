"""Prompts as the model was trained to read them: the tokenizer's chat template, or plain text.

A task's prompt is either a string or a list of chat messages (``{"role", "content"}``).
:class:`PromptRenderer` turns it into the exact text and token ids a generator is given:

- with a chat template (``model.chat_template: auto`` and a tokenizer that has one, or a
  ``.jinja`` file): a string becomes one user message, ``task.system_prompt`` is put first as
  a system message, and the template is applied with the generation prompt (the assistant
  turn's opening markers) and ``model.chat_template_kwargs`` (e.g. ``enable_thinking``). The
  text is then encoded with ``add_special_tokens=False``: the template already holds every
  special token it wants, and encoding it again would put a second BOS in front;
- without one (``none``, or ``auto`` on a tokenizer without a template, such as the built-in
  task tokenizer): the string is encoded as it always was, ``tokenizer.encode(prompt)``, after
  ``system_prompt`` and a blank line when one is set. Message prompts need a template.

The ids are computed once per prompt and cached: the learner later scores exactly these ids
and the sampled ones, and nothing is ever re-tokenised from text.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scalerl.data.tasks.base import Prompt


class ChatTemplateError(ValueError):
    """A prompt or template the renderer cannot use, in one sentence."""


@dataclass(frozen=True)
class ChatFormat:
    """How prompts are rendered (picklable: generators build their renderer from it)."""

    template: str = "auto"
    """``auto`` (the tokenizer's template when it has one), ``none``, or a ``.jinja`` path."""
    system_prompt: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_prompt_tokens: int | None = None
    """Prompts longer than this keep their last this many tokens (``task.long_prompts=cut``),
    said once per process; None: never cut (``refuse`` checked them before training)."""


def template_text(fmt: ChatFormat, tokenizer) -> str | None:
    """The Jinja template ``fmt`` renders with, or None for plain text."""
    if fmt.template == "none":
        return None
    if fmt.template == "auto":
        return getattr(tokenizer, "chat_template", None) or None
    path = Path(fmt.template)
    if not path.is_file():
        raise ChatTemplateError(f"model.chat_template: the file {path} does not exist.")
    return path.read_text(encoding="utf-8")


class PromptRenderer:
    """Task prompts -> (rendered text, token ids), once per distinct prompt."""

    _warned = False  # a prompt was cut in this process (said once)

    def __init__(self, tokenizer, fmt: ChatFormat = ChatFormat()) -> None:
        self.tokenizer, self.fmt = tokenizer, fmt
        self.template = template_text(fmt, tokenizer)
        self._cache: dict[Any, np.ndarray] = {}  # prompt -> (L,) int32 ids
        params = inspect.signature(tokenizer.encode).parameters.values()
        # a task tokenizer takes no options and has no special tokens to leave out
        self._options = any(p.name == "add_special_tokens" or p.kind is p.VAR_KEYWORD for p in params)

    @property
    def chat(self) -> bool:
        return self.template is not None

    def text(self, prompt: Prompt) -> str:
        """The exact text the model is given for ``prompt`` (rendered again: it is asked for
        a few samples per evaluation, while ids are asked for every prompt of every step)."""
        return self._render_text(prompt)

    def ids(self, prompt: Prompt) -> list[int]:
        """The token ids the model is given for ``prompt`` (a fresh list: callers may keep it)."""
        key = prompt if isinstance(prompt, str) else tuple((m["role"], m["content"]) for m in prompt)
        hit = self._cache.get(key)
        if hit is None:  # int32, not a list of Python ints: a million prompts stay ~1 GB, not ~6
            hit = self._cache[key] = self._cut(np.asarray(self._render(prompt)[1], dtype=np.int32))
        return hit.tolist()

    def _cut(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` cut to their last ``max_prompt_tokens`` (the question's end and the generation
        prompt stay), the first cut of this process said on stderr."""
        limit = self.fmt.max_prompt_tokens
        if limit is None or len(ids) <= limit:
            return ids
        if not PromptRenderer._warned:
            PromptRenderer._warned = True
            print(f"task.long_prompts=cut: a prompt of {len(ids)} tokens was cut to its last {limit}, which the "
                  "model's context leaves beside the completion (only this first cut is said)",
                  file=sys.stderr, flush=True)
        return ids[max(len(ids) - limit, 0):]

    def measure(self, prompt: Prompt, limit: int) -> tuple[int, bool]:
        """``(tokens, exact)`` of ``prompt`` rendered, found without tokenizing more than
        :data:`COUNT_CHUNK_CHARS` characters at once: a fast tokenizer's transient memory is about
        0.35 GB per MB of text, so tokenizing a 30 MB prompt whole aborted the trainer (reliability
        probe 3, D7).

        A text of at most one chunk is tokenized whole: exact. A longer one is tokenized a chunk
        at a time, cut at whitespace (where pre-tokenizers split anyway), and each cut may split
        one token in two, so the count less the cuts is a lower bound: once it is past ``limit``
        the answer is ``(that bound, False)``, and the rest is never read. A sum below ``limit``
        with the cuts added fits for sure; one within the cuts of it is settled by tokenizing the
        whole text, which then holds no more than about ``limit`` tokens' worth. (A bound from
        characters alone would be unsound: a word-level tokenizer's one unknown token covers any
        length.)"""
        text = self._render_text(prompt)
        if len(text) <= COUNT_CHUNK_CHARS:
            return len(self._encode(text)), True
        total, start, cuts = 0, 0, -1
        while start < len(text):
            end = _chunk_end(text, start)
            total += len(self._encode(text[start:end], first=start == 0))
            start, cuts = end, cuts + 1
            if total - cuts > limit:
                return total - cuts, False
        if total + cuts <= limit:
            return total, False
        return len(self._encode(text)), True

    def _encode(self, text: str, first: bool = True) -> list[int]:
        """``text``'s ids as the model gets them (a plain prompt with the tokenizer's special
        tokens, which a chat template writes itself); ``first=False``: a later chunk, without them."""
        if first and not self.chat:
            return self.tokenizer.encode(text)  # as it always was: a task tokenizer takes no options
        if not self._options:
            return self.tokenizer.encode(text)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _render(self, prompt: Prompt) -> tuple[str, list[int]]:
        text = self._render_text(prompt)
        return text, self._encode(text)

    def _render_text(self, prompt: Prompt) -> str:
        system = self.fmt.system_prompt
        if not self.chat:
            if not isinstance(prompt, str):
                raise ChatTemplateError(
                    "chat-message prompts need a chat template, and the tokenizer has none "
                    f"(model.chat_template: {self.fmt.template}); set model.chat_template to a "
                    ".jinja file, or give the prompts as strings.")
            return f"{system}\n\n{prompt}" if system else prompt
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if system and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system}, *messages]
        return self.tokenizer.apply_chat_template(
            messages, chat_template=self.template, tokenize=False, add_generation_prompt=True,
            **dict(self.fmt.kwargs))


COUNT_CHUNK_CHARS = 1 << 18
"""Characters :meth:`PromptRenderer.measure` tokenizes at once (about 90 MB of a fast
tokenizer's working memory)."""


def _chunk_end(text: str, start: int) -> int:
    """Where the chunk from ``start`` ends: before the last whitespace within
    :data:`COUNT_CHUNK_CHARS` (or there, with none), or the text's end."""
    end = start + COUNT_CHUNK_CHARS
    if end >= len(text):
        return len(text)
    space = max(text.rfind(c, start + 1, end) for c in " \n\t")
    return space if space > start else end
