"""A tiny instruct model directory, built from scratch: Qwen2-style, ChatML template.

Nothing can be downloaded here, yet the chat path (templates, end-of-turn tokens, a user's
JSONL of messages, LoRA, export) must run for real in tests and benches. This builds what a
local instruct checkpoint looks like on disk: ``model_type: qwen2``, a tokenizer whose
``chat_template`` is ChatML (``<|im_start|>role\\n...<|im_end|>``), and a generation config
whose ``eos_token_id`` lists both the tokenizer's EOS and ``<|im_end|>``, the end of an
assistant turn, as Qwen2-Instruct's does. The weights are random: a model to train, not
to talk to.
"""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TURN_MARKERS = ("<|im_start|>", "<|im_end|>")


def build_chat_model_dir(directory: str | Path, preset: str = "nano", seed: int = 0,
                         extra_words: tuple[str, ...] = ()) -> Path:
    """Write a random ``preset``-sized Qwen2 model with a ChatML tokenizer to ``directory``."""
    from scalerl.data.tasks.tokenizer import build_task_tokenizer
    from scalerl.models.build import build_model
    from scalerl.models.load import save_pretrained

    tokenizer = build_task_tokenizer(extra_words=("system", "user", "assistant", *extra_words))
    tokenizer.add_special_tokens({"additional_special_tokens": list(TURN_MARKERS)})
    tokenizer.chat_template = CHATML
    model = build_model(preset, len(tokenizer), arch="qwen2", seed=seed, tokenizer=tokenizer)
    end_of_turn = tokenizer.convert_tokens_to_ids(TURN_MARKERS[1])
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_turn]
    return save_pretrained(model, tokenizer, directory)
