"""A small word-and-character tokenizer for the built-in tasks, in Hugging Face format.

It lives with the tasks whose text it encodes (issue 40: it sat in ``models/`` and reached
into ``data/`` for the calculator's tags); ``scalerl.models`` re-exports
:func:`build_task_tokenizer` for the models it builds.

Built with the ``tokenizers`` library and wrapped as ``PreTrainedTokenizerFast`` so it saves
next to the model and ``AutoTokenizer.from_pretrained(dir)`` loads it back.

Design (why each choice):

- **Digits are single tokens** (``"4821"`` -> ``4 8 2 1``) so column arithmetic is learnable.
- **``<think>`` / ``</think>`` are single added tokens**, never split, and are *not* special,
  so ``decode(..., skip_special_tokens=True)`` keeps them for the reward parser.
- **The calculator's tool markup is single added tokens too** (``<calc>``, ``</calc>``,
  ``<result>``, ``</result>``; not special), as a tool-using model's ``<tool_call>`` and
  ``<tool_response>`` are: a call is 2 tokens plus its expression and an observation 2 plus
  its value, not 30 characters. The stop string ``</calc>`` is then one token.
- **Known words are single tokens with an optional leading space** (``" time"``), so the
  forced-interruption phrase of digest §2.9 (``scalerl.types.INTERRUPTION_PHRASE``) costs 19
  tokens instead of ~80 characters.
- **Everything else falls back to one printable-ASCII character per token** (space, tab and
  newline included), so any ASCII text round-trips exactly; the decoder simply concatenates.
- ``<bos>`` is prepended by the post-processor when ``add_special_tokens=True``; ``<eos>`` ends
  a completion and ``<pad>`` pads batches.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from scalerl.data.tasks.calculator import CALL_CLOSE, CALL_OPEN, RESULT_CLOSE, RESULT_OPEN
from scalerl.types import INTERRUPTION_PHRASE

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_TAGS = (CALL_OPEN, CALL_CLOSE, RESULT_OPEN, RESULT_CLOSE)

# Words of the built-in task prompts and of the interruption phrase (digest §2.9).
TASK_WORDS: tuple[str, ...] = ("add", "sub", "mul", "answer", "carry")


def _phrase_words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", text)


def _vocabulary(words: Iterable[str]) -> list[str]:
    """Specials, then printable ASCII characters, then each word bare and space-prefixed, then
    the tool tags (last, so adding them left every older token's id as it was)."""
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = [PAD, BOS, EOS, UNK, THINK_OPEN, THINK_CLOSE, *chars]
    for w in sorted(set(words)):
        for piece in (w, " " + w):
            if piece not in vocab:
                vocab.append(piece)
    return vocab + [t for t in TOOL_TAGS if t not in vocab]


def _split_pattern(words: Iterable[str]) -> str:
    """Regex that isolates `` ?word`` for known words (longest first) and single characters."""
    alts = sorted(set(words), key=len, reverse=True)
    word_alt = "|".join(re.escape(w) for w in alts)
    # A known word counts only at a word boundary on both sides: "address" stays chars.
    return rf"(?: |(?<![A-Za-z]))(?:{word_alt})(?![A-Za-z])|[\s\S]"


def build_task_tokenizer(extra_words: Iterable[str] = ()):
    """Build the built-in tasks' tokenizer as a ``PreTrainedTokenizerFast``.

    ``extra_words`` adds more whole-word tokens (for a user's own synthetic task).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    words = [*TASK_WORDS, *_phrase_words(INTERRUPTION_PHRASE), *extra_words]
    vocab = _vocabulary(words)
    ids = {tok: i for i, tok in enumerate(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=ids, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_split_pattern(words)), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (PAD, BOS, EOS, UNK)])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE, *TOOL_TAGS)])
    tok.post_processor = TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, ids[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
        scalerl_task_tokenizer=True,
    )
