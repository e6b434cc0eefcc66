"""Build tiny causal LMs from presets and load local Hugging Face ones (the SFT warm-up of a
built model is a training stage: ``scalerl.pipeline.sft``)."""

from scalerl.data.tasks.tokenizer import build_task_tokenizer
from scalerl.models.build import PRESETS, build_model, count_parameters
from scalerl.models.load import load_pretrained, save_pretrained

__all__ = [
    "PRESETS",
    "build_model",
    "build_task_tokenizer",
    "count_parameters",
    "load_pretrained",
    "save_pretrained",
]
