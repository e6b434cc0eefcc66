"""Prompt rendering: the tokenizer's chat template, or plain text, once per prompt."""

import pytest

from scalerl.data.tasks.tokenizer import build_task_tokenizer
from scalerl.models.chat import ChatFormat, ChatTemplateError, PromptRenderer
from scalerl.models.tiny_chat import CHATML, build_chat_model_dir


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    from scalerl.models.load import load_tokenizer

    return load_tokenizer(build_chat_model_dir(tmp_path_factory.mktemp("chat") / "model"))


def test_plain_tokenizer_keeps_the_plain_prompt():
    tok = build_task_tokenizer()
    r = PromptRenderer(tok)  # auto, and the task tokenizer has no template
    assert not r.chat
    assert r.ids("add 1 2") == tok.encode("add 1 2")  # exactly as before chat templates
    assert r.text("add 1 2") == "add 1 2"
    sys = PromptRenderer(tok, ChatFormat(system_prompt="Be brief."))
    assert sys.text("add 1 2") == "Be brief.\n\nadd 1 2"


def test_messages_need_a_template():
    with pytest.raises(ChatTemplateError, match="need a chat template"):
        PromptRenderer(build_task_tokenizer()).ids([{"role": "user", "content": "hi"}])


def test_chat_template_renders_with_turn_markers(chat_tokenizer):
    r = PromptRenderer(chat_tokenizer, ChatFormat(system_prompt="Be brief."))
    text = r.text("What is 3 add 4?")
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 3 add 4?"
                    "<|im_end|>\n<|im_start|>assistant\n")
    ids = r.ids("What is 3 add 4?")
    assert ids[0] == chat_tokenizer.convert_tokens_to_ids("<|im_start|>")  # no second BOS in front
    assert chat_tokenizer.decode(ids) == text  # the ids are the text, token for token
    # a string is one user message; messages with their own system turn keep it
    own = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert r.text(own).startswith("<|im_start|>system\nS<|im_end|>")
    assert PromptRenderer(chat_tokenizer, ChatFormat(template="none")).text("hi") == "hi"


def test_rendered_once_per_prompt(chat_tokenizer, monkeypatch):
    r = PromptRenderer(chat_tokenizer)
    calls = []
    real = chat_tokenizer.apply_chat_template
    monkeypatch.setattr(chat_tokenizer, "apply_chat_template", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = r.ids([{"role": "user", "content": "hi"}])
    first.append(-1)  # the caller's list is its own: the cache is not changed through it
    assert r.ids([{"role": "user", "content": "hi"}]) == first[:-1]
    assert len(calls) == 1


def test_template_file_and_kwargs(tmp_path, chat_tokenizer):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
                    "{% if shout %}!{% endif %}")
    r = PromptRenderer(chat_tokenizer, ChatFormat(template=str(path), kwargs={"shout": True}))
    assert r.text("hi") == "[hi]!"
    with pytest.raises(ChatTemplateError, match="does not exist"):
        PromptRenderer(chat_tokenizer, ChatFormat(template=str(tmp_path / "missing.jinja")))
    assert CHATML in (chat_tokenizer.chat_template or "")


class _Spy:
    """A tokenizer that remembers the longest text it was asked to tokenize."""

    def __init__(self, tok):
        self.tok, self.longest = tok, 0

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def encode(self, text, **kw):
        self.longest = max(self.longest, len(text))
        return self.tok.encode(text, **kw)


@pytest.mark.parametrize("chat", [False, True])
def test_a_huge_prompt_is_measured_a_chunk_at_a_time(chat, chat_tokenizer):
    # reliability probe 3 (D7): the long-prompt check tokenized a 30 MB prompt whole and the
    # tokenizer aborted the trainer (about 0.35 GB of memory per MB of text)
    from scalerl.models.chat import COUNT_CHUNK_CHARS

    spy = _Spy(chat_tokenizer if chat else build_task_tokenizer())
    r = PromptRenderer(spy)
    huge = "1 add 2 " * (30 << 20 >> 3)  # 30 MB
    n, exact = r.measure(huge, 500)
    assert n > 500 and not exact and spy.longest <= COUNT_CHUNK_CHARS
    short = "What is 3 add 4?"
    assert r.measure(short, 500) == (len(r.ids(short)), True)
    # a long prompt that fits is counted exactly as a whole tokenization counts it
    fits = "1 add 2 " * (COUNT_CHUNK_CHARS // 4)
    assert r.measure(fits, 10**7)[0] == len(r.ids(fits))
