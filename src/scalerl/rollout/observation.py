"""An environment's observation as the token ids appended to a trajectory, never re-tokenising it.

The most frequent multi-turn bug in the peers' trackers (verl, TRL): the history is rendered
again from messages before each turn, and the template's rendering of earlier turns (Qwen3
drops their think blocks), or a different tokenisation of the same text, gives ids the
generator never sampled. Here a trajectory only ever grows: the model's sampled ids, then
the ids of the observation, rendered on their own.

With a chat template (``transformers``' ``apply_chat_template``, never hand-written), the
observation's ids are the text the template adds for it: render a fixed probe conversation
(``base``), then the same plus the observation messages with the generation prompt
(``full``); ``full`` starts with ``base``, and the rest is the observation's own text (its
role markers and the next assistant turn's opening). The probe is ``[user, assistant]``, or
``[user]`` for a template that renders an assistant turn differently once it is no longer
the last (Qwen3 drops its think block): the sampled turn is never rendered, so either gives
the same observation text. Between the assistant's content and that text the template closes
the assistant turn (``<|im_end|>\n`` in ChatML): a turn that ended with an end-of-turn id
already holds the closing's first part, so only what follows it is added; a turn that stopped
otherwise (a stop string) gets the whole closing. Without a template the observation is
plain text, encoded without special tokens.
"""

from __future__ import annotations

from scalerl.models.chat import ChatFormat, ChatTemplateError, template_text

# distinctive contents, so that finding the assistant's in the rendered text is unambiguous
_PROBE_USER, _PROBE_ASSISTANT = "scalerl-probe-user", "scalerl-probe-assistant"
_PROBES = ({"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT})


class ObservationRenderer:
    """``text(observation, ended_with)``: the text an observation appends to a trajectory (its
    ids are that text encoded on its own, no BOS, nothing earlier re-encoded)."""

    def __init__(self, tokenizer, fmt: ChatFormat | None = None, role: str = "tool") -> None:
        fmt = fmt or ChatFormat()
        self.tokenizer, self.fmt, self.role = tokenizer, fmt, role
        self.template = template_text(fmt, tokenizer)
        if self.template is not None:
            self.closing = self._closing()

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                  add_generation_prompt=generation_prompt, **dict(self.fmt.kwargs))

    def _closing(self) -> str:
        """What the template writes after an assistant turn's content (the turn's closing)."""
        text = self._render(list(_PROBES), False)
        head, sep, tail = text.rpartition(_PROBE_ASSISTANT)
        if not sep:
            raise ChatTemplateError("the chat template does not write an assistant message's content, so "
                                    "observations cannot be appended after it")
        return tail

    def messages(self, observation: str | list[dict]) -> list[dict]:
        """The observation as chat messages (a string becomes one ``role`` message)."""
        if isinstance(observation, str):
            return [{"role": self.role, "content": observation}]
        return list(observation)

    def text(self, observation: str | list[dict], ended_with: str = "") -> str:
        """The text appended after a model turn whose last token decodes to ``ended_with``."""
        if self.template is None:
            if not isinstance(observation, str):
                raise ChatTemplateError("chat-message observations need a chat template, and the tokenizer "
                                        f"has none (model.chat_template: {self.fmt.template})")
            return observation
        closing = self.closing
        at = closing.find(ended_with) if ended_with else -1
        if at >= 0 and not closing[:at].strip():  # the sampled end-of-turn id is already there
            closing = closing[at + len(ended_with):]
        return closing + self._suffix(self.messages(observation))

    def _suffix(self, messages: list[dict]) -> str:
        """The text ``messages`` add after a probe conversation, with the generation prompt."""
        for probe in (_PROBES, _PROBES[:1]):
            base = self._render(list(probe), False)
            try:
                full = self._render([*probe, *messages], True)
            except Exception:  # noqa: BLE001 - a template may refuse this order of roles (jinja raise)
                continue
            if full.startswith(base):
                return full[len(base):]
        raise ChatTemplateError("the chat template renders a conversation's earlier messages differently once "
                                f"a {self.role!r} message follows, so an observation's tokens cannot be appended")
