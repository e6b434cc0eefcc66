"""``scalerl.integrations.trl.ForecastCallback`` inside a real TRL ``GRPOTrainer``: a tiny Qwen2
built from a config with a two-letter tokenizer (nothing downloaded), trained to write "a".

Checked: the forecast's keys reach ``log_history`` and the TensorBoard events through the
trainer's own ``report_to``; the callback's run folder is read by ``scalerl plan`` with the
callback's last record's numbers; both stops end the run at an evaluation, the one after the
forecast that decided; a metric never logged is one warning and the training goes on."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from scalerl.integrations.trl import KEYS, ForecastCallback  # noqa: E402
from scalerl.runfolder import Forecast as K  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

EVAL_EVERY = 2


def _tokenizer():
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", "a", "b"])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # one token a letter
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def share_of_a(completions, **kwargs):
    """The reward: the share of the completion's letters that are "a" (in [0, 1])."""
    return [c.count("a") / max(len(c), 1) for c in completions]


def _train(tmp_path: Path, callback: ForecastCallback, *, steps: int, lr: float):
    """A real GRPOTrainer run with ``callback``: evaluation every ``EVAL_EVERY`` steps, TensorBoard."""
    torch.manual_seed(0)
    tok = _tokenizer()
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                         pad_token_id=0, eos_token_id=1, tie_word_embeddings=True))  # fmt: skip
    data = Dataset.from_dict({"prompt": ["ab", "ba", "aa", "bb"] * 4})
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(tmp_path / "tb")  # transformers 5 has no logging_dir
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), report_to=["tensorboard"], max_steps=steps,
                          per_device_train_batch_size=8, num_generations=4, per_device_eval_batch_size=8,
                          max_completion_length=8, eval_strategy="steps", eval_steps=EVAL_EVERY, logging_steps=1,
                          save_strategy="no", use_cpu=True, bf16=False, learning_rate=lr, seed=0, disable_tqdm=True)  # fmt: skip
    trainer = trl.GRPOTrainer(model=model, args=args, reward_funcs=share_of_a, train_dataset=data,
                              eval_dataset=data.select(range(8)), processing_class=tok, callbacks=[callback])  # fmt: skip
    trainer.train()
    return trainer


@pytest.fixture(autouse=True)
def _tb_env():
    before = os.environ.get("TENSORBOARD_LOGGING_DIR")
    yield
    if before is None:
        os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
    else:
        os.environ["TENSORBOARD_LOGGING_DIR"] = before


def test_the_forecast_reaches_the_trainers_reporters_and_plan_on_its_folder_agrees(tmp_path, capsys):
    from scalerl.cli import main
    from scalerl.fit.readers.tensorboard import _tb_scalars  # every tag the events hold

    out = tmp_path / "run"
    trainer = _train(tmp_path, ForecastCallback(metric="eval_reward", target=0.95, out=out), steps=24, lr=0.01)
    logged = [h for h in trainer.state.log_history if any(k.startswith("forecast/") for k in h)]
    assert logged and set(logged[-1]) >= {"forecast/state_code", "forecast/value_at_budget", "step"}
    assert set(k for h in logged for k in h if k.startswith("forecast/")) <= set(KEYS)
    tags = {t for f in (tmp_path / "tb").rglob("events.out.tfevents.*") for t in _tb_scalars(f)}
    assert "train/forecast/value_at_budget" in tags and "train/forecast/state_code" in tags  # through report_to
    # the run folder: scalerl plan on it answers with the callback's last forecast
    records = read_records(out / "metrics.jsonl")
    last = [r for r in records if K.STATE in r][-1]
    assert json.loads((out / "status.json").read_text())["state"] == "finished"
    plan = tmp_path / "plan.json"
    assert main(["plan", str(out), "--json", str(plan)]) == 0  # the target: the folder's forecast.target
    answer = json.loads(plan.read_text())
    assert answer["target"] == 0.95 and answer["forecast"]["state"]["name"] == last[K.STATE]
    assert answer["forecast"]["budget"] == pytest.approx(last[K.BUDGET])
    at = answer["at_budget"]  # one answer: the same draws, to the precision they print
    for key, field in (("value", K.FINAL), ("pred_lo", K.FINAL_LO), ("pred_hi", K.FINAL_HI)):
        assert at[key] == pytest.approx(last[field], abs=1e-9), key
    capsys.readouterr()


@pytest.mark.parametrize("stop", ["p_reach", "not_learning"])
def test_a_stop_ends_the_run_at_the_evaluation_after_the_forecast_that_decided(tmp_path, caplog, stop):
    """A run that cannot learn (learning rate 0): the forecast finds it not learning, and its
    chance of 0.95 small; either rule stops it at the next evaluation, in one line."""
    kw = {"stop_if_p_reach_below": 0.5} if stop == "p_reach" else {"stop_if_not_learning": True}
    with caplog.at_level(logging.WARNING, logger="scalerl.trl"):
        trainer = _train(tmp_path, ForecastCallback(metric="eval_reward", target=0.95, out=tmp_path / "run", **kw),
                         steps=60, lr=0.0)  # fmt: skip
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ForecastCallback: stopping:")]
    assert len(said) == 1 and trainer.state.global_step < 60, said
    end = trainer.state.global_step
    assert end % EVAL_EVERY == 0  # at an evaluation
    made_at = int(said[0].rsplit("made at step ", 1)[1].rstrip(")"))
    assert made_at == end - EVAL_EVERY  # the forecast of the evaluation before decided
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "stopped"


def test_a_metric_never_logged_is_one_warning_and_training_goes_on(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="scalerl.trl"):
        trainer = _train(tmp_path, ForecastCallback(metric="eval_accuracy", out=tmp_path / "run"), steps=6, lr=0.01)
    assert trainer.state.global_step == 6
    said = [r.getMessage() for r in caplog.records if "eval_accuracy" in r.getMessage()]
    assert len(said) == 2 and "no forecast, and training goes on" in said[0] and "never logged" in said[1]
    with pytest.raises(ValueError, match="x must be one of"):
        ForecastCallback(x="epochs")
