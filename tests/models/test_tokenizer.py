import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalerl.data.tasks import get_task
from scalerl.data.tasks.tokenizer import build_task_tokenizer
from scalerl.types import INTERRUPTION_PHRASE

_TOK = build_task_tokenizer()


@pytest.fixture(scope="module")
def tok():
    return _TOK


def test_think_tags_are_single_tokens(tok):
    for tag in ("<think>", "</think>"):
        ids = tok(tag, add_special_tokens=False).input_ids
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids) == [tag]


def test_tool_tags_are_single_tokens_kept_by_decode_and_appended_last(tok):
    # A calculator observation is its value plus 2 tokens; the tags come after every older
    # token, so adding them moved no id (a saved model's tokenizer still means the same).
    text = "<calc>347*62</calc><result>21514</result> 21514"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(ids)[:2] == ["<calc>", "3"] and len(ids) == 2 + 6 + 2 + 5 + 6
    assert tok.decode(ids, skip_special_tokens=True) == text
    tags = tok.convert_tokens_to_ids(["<calc>", "</calc>", "<result>", "</result>"])
    assert tags == list(range(len(tok) - 4, len(tok)))
    assert tok.convert_tokens_to_ids("</think>") == 5


def test_digits_are_single_tokens(tok):
    ids = tok("4821", add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(ids) == ["4", "8", "2", "1"]


def test_interruption_phrase_is_short_and_round_trips(tok):
    ids = tok(INTERRUPTION_PHRASE, add_special_tokens=False).input_ids
    assert 12 <= len(ids) <= 20
    assert tok.decode(ids) == INTERRUPTION_PHRASE
    assert tok.convert_ids_to_tokens(ids)[-1] == "</think>"


def test_small_vocab_and_special_ids(tok):
    assert len(tok) < 200
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}) == 3
    assert tok("add 1+2 =").input_ids[0] == tok.bos_token_id


def test_task_texts_round_trip_exactly(tok):
    task = get_task("addition", min_digits=1, max_digits=4, num_operands=3)
    for i in range(50):
        ex = task.train_example(i)
        for text in (task.prompt(ex), task.demonstration(ex)):
            ids = tok(text).input_ids
            assert tok.decode(ids, skip_special_tokens=True) == text


def test_arbitrary_ascii_round_trips_via_character_fallback(tok):
    text = "address\tthinking\n x  y!? {ok} </think>answer"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    # "address" must not be split into the known word "add" + characters.
    assert "add" not in tok.convert_ids_to_tokens(ids)


def test_skip_special_tokens_keeps_think_tags(tok):
    ids = tok("<think> 1+1=2 </think> 2").input_ids + [tok.eos_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "<think> 1+1=2 </think> 2"


def test_save_and_reload_with_autotokenizer(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "add 12+345 =" + INTERRUPTION_PHRASE
    assert again(text).input_ids == tok(text).input_ids
    assert again.pad_token_id == tok.pad_token_id and again.eos_token_id == tok.eos_token_id


_ASCII = "".join(c for c in string.printable if c not in "\x0b\x0c\r")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*_ASCII, "<think>", "</think>", " time", "add", "Okay"])))
def test_any_printable_ascii_round_trips(pieces):
    tok, text = _TOK, "".join(pieces)
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.unk_token_id not in ids and tok.decode(ids) == text


def test_extra_words_become_single_tokens():
    tok = build_task_tokenizer(extra_words=["countdown"])
    assert tok.convert_ids_to_tokens(tok("go countdown", add_special_tokens=False).input_ids) == [
        "g", "o", " countdown"]
