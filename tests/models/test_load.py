import pytest
import torch

from scalerl.data.tasks.tokenizer import build_task_tokenizer
from scalerl.models.build import build_model
from scalerl.models.load import load_pretrained, resolve_dtype, save_pretrained


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def saved(request, tmp_path_factory):
    tok = build_task_tokenizer()
    model = build_model("nano", len(tok), arch=request.param, tokenizer=tok, seed=1)
    d = save_pretrained(model, tok, tmp_path_factory.mktemp(request.param))
    return model, tok, d


def _logits(model, tok):
    ids = tok(["add 12+34 =<think> 2+4"], return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits.float()


def test_round_trip_through_auto_classes_gives_identical_logits(saved):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, d = saved
    again = AutoModelForCausalLM.from_pretrained(d)
    assert torch.equal(_logits(again, tok), _logits(model, tok))
    assert again.config.eos_token_id == tok.eos_token_id
    if again.config.model_type == "llama":
        # transformers 5.x forces Qwen2Tokenizer next to a qwen2 config; load_pretrained copes.
        assert AutoTokenizer.from_pretrained(d)("add 1+2 =").input_ids == tok("add 1+2 =").input_ids


def test_load_pretrained_fp32_matches_and_bf16_is_close(saved):
    model, tok, d = saved
    m32, t32 = load_pretrained(d, "float32")
    assert t32("add 1+2 =").input_ids == tok("add 1+2 =").input_ids
    assert next(m32.parameters()).dtype == torch.float32 and not m32.training
    assert torch.equal(_logits(m32, t32), _logits(model, tok))
    m16, t16 = load_pretrained(d, dtype="bfloat16")
    assert next(m16.parameters()).dtype == torch.bfloat16
    torch.testing.assert_close(_logits(m16, t16), _logits(model, tok), atol=0.1, rtol=0.05)


def test_not_a_model_directory_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a Hugging Face model directory"):
        load_pretrained(tmp_path)


def test_unknown_dtype_is_rejected():
    assert resolve_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int8")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_without_dropout_scores_in_train_mode_as_in_eval_mode(arch):
    """GPT-2's default dropout (modules) and Llama's attention dropout (a float the attention
    passes to sdpa while training): the learner's train-mode forward equals the generators'
    eval-mode one once they are off, and differs before (so the test can fail)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from scalerl.models.load import without_dropout

    torch.manual_seed(0)
    model = (GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=64))
             if arch == "gpt2" else
             LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, attention_dropout=0.5, attn_implementation="sdpa")))
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        expected = model.eval()(ids).logits
        assert not torch.allclose(model.train()(ids).logits, expected)
        without_dropout(model)
        torch.testing.assert_close(model.train()(ids).logits, expected)
