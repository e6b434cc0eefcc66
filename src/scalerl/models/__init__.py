"""Build tiny causal LMs from presets, load local Hugging Face ones, and SFT-warm them up."""

from scalerl.models.build import PRESETS, build_model, count_parameters
from scalerl.models.load import load_pretrained, save_pretrained
from scalerl.models.sft import SFTResult, sft_warmup
from scalerl.models.tokenizer import build_task_tokenizer

__all__ = [
    "PRESETS",
    "SFTResult",
    "build_model",
    "build_task_tokenizer",
    "count_parameters",
    "load_pretrained",
    "save_pretrained",
    "sft_warmup",
]
