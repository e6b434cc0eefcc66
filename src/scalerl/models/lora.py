"""LoRA through ``peft``: the learner trains adapters only; generators sample with them.

``W' = W0 + (alpha / rank) · B A`` on each targeted linear layer (Hu et al., 2021), with
``A (rank, in)`` and ``B (out, rank)`` trained and ``W0`` frozen.

- **Learner.** :func:`apply_lora` wraps the model with ``peft.get_peft_model``; only the
  adapter parameters require grad, so only they reach AdamW and the checkpoint's optimiser
  state. The LM head is never a target: the FP32 head (digest §2.4) reads the frozen head
  weight as before.
- **Publishing.** Only the adapters travel (:func:`published_parameters`): rank r on a
  d×d layer is 2·r·d numbers instead of d², so a version costs a small fraction of the
  full weights' bytes.
- **Generators** hold the plain base model and :class:`AdapterMerger` turns each published
  adapter into the merged weights of the targeted layers, loaded in place as a partial
  update: the engine's fast decode path, KV cache and in-flight swap stay exactly as they
  are, and a generator can never sample with the base model by mistake (a trap of peers'
  LoRA paths: verl#7495, ms-swift#9856), since the merge is the only way weights arrive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

_A, _B = ".lora_A.default.weight", ".lora_B.default.weight"
_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraSpec:
    """``model.lora`` as plain data (picklable into generator processes)."""

    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]
    """Linear layer names (``config_model.LoraConfig`` holds the defaults)."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def linear_layers(model: torch.nn.Module) -> dict[str, tuple[int, int]]:
    """``{name: (in, out)}`` of the linear layers LoRA may target, by the last part of their
    module name (``q_proj``), each the smallest sizes among the layers of that name; the LM
    head is left out (it stays frozen: the FP32 head reads it)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            leaf = name.rsplit(".", 1)[-1]
            i, o = out.get(leaf, (module.in_features, module.out_features))
            out[leaf] = (min(i, module.in_features), min(o, module.out_features))
    return out


def check_targets(model: torch.nn.Module, spec: LoraSpec, where: str) -> None:
    """``ValueError`` (one sentence naming ``where``, the model) unless every name of
    ``spec.targets`` is a linear layer of ``model`` other than its LM head, there is at least
    one, and ``spec.rank`` is at most the smallest size of a targeted layer."""
    layers = linear_layers(model)
    known = f"its linear layers are {', '.join(sorted(layers)) or 'none'}"
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_name = next((n.rsplit(".", 1)[-1] for n, m in model.named_modules() if head is not None and m is head), None)
    if not spec.targets:
        raise ValueError(f"model.lora.targets is empty: name the linear layers of {where} to adapt ({known})")
    if head_name in spec.targets:
        raise ValueError(f"model.lora.targets names {head_name}, the LM head of {where}, which stays frozen "
                         f"(the FP32 head reads it); {known}")
    unknown = [t for t in spec.targets if t not in layers]
    if unknown:
        names = ", ".join(repr(t) for t in unknown)
        what = "which is no linear layer" if len(unknown) == 1 else "which are no linear layers"
        raise ValueError(f"model.lora.targets names {names}, {what} of {where}; {known}")
    smallest, layer = min((min(layers[t]), t) for t in spec.targets)
    if spec.rank > smallest:
        raise ValueError(f"model.lora.rank {spec.rank} is more than {smallest}, the smaller size of the targeted "
                         f"layer {layer} ({layers[layer][0]} in, {layers[layer][1]} out) of {where}, so its adapter "
                         f"would hold more numbers than the layer; use a rank of at most {smallest}")


def apply_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """``model`` wrapped by peft with fresh adapters (``B = 0``, so it starts as the base);
    its linear layers are :func:`fused_lora_linear`'s (peft's own, with a fused forward).
    Targets or a rank the model cannot take are ``ValueError`` (:func:`check_targets`)."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, spec, "the model")

    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=list(spec.targets), bias="none", task_type="CAUSAL_LM")
    config._register_custom_module({torch.nn.Linear: fused_lora_linear()})
    return get_peft_model(model, config)


@functools.cache
def fused_lora_linear() -> type:
    """peft's LoRA ``Linear`` whose plain case runs ``y = W0 x + s·B (A x)`` as one ``addmm``.

    peft computes ``result + lora_B(lora_A(x)) * scaling``: a product, a scaled copy and a sum,
    each a full pass over the (tokens, out) output, forward and backward. On a CPU those
    memory-bound passes cost more than the weight gradients LoRA saves (measured on the
    ``base`` preset: peft's layer made a LoRA step slower than full fine-tuning). ``addmm``
    writes ``result + s·h Bᵀ`` in one pass. Dropout, several adapters, merged weights or any
    LoRA variant take peft's own path; tests check both agree, outputs and gradients."""
    from peft.tuners.lora.layer import Linear

    class FusedLoraLinear(Linear):
        def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            names = self.active_adapters
            if (self.disable_adapters or self.merged or args or kwargs or len(names) != 1
                    or names[0] not in self.lora_A or names[0] in self.lora_variant
                    or not isinstance(self.lora_dropout[names[0]], torch.nn.Identity)):
                return super().forward(x, *args, **kwargs)
            name = names[0]
            result = self.base_layer(x)  # (..., out)
            a, b = self.lora_A[name].weight, self.lora_B[name].weight  # (r, in), (out, r)
            h = torch.nn.functional.linear(x.to(a.dtype), a)  # (..., r)
            out = torch.addmm(result.reshape(-1, result.shape[-1]).to(b.dtype), h.reshape(-1, h.shape[-1]), b.t(),
                              alpha=self.scaling[name])
            return out.view(result.shape).to(result.dtype)

    return FusedLoraLinear


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def published_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """What a weight sync sends: every parameter, or with LoRA the adapters alone."""
    params = list(model.named_parameters())
    return [(n, p) for n, p in params if p.requires_grad] if is_lora(model) else params


def _layer(name: str) -> str | None:
    """``base_model.model.X.lora_A.default.weight`` -> ``X`` (the adapted linear layer)."""
    for suffix in (_A, _B):
        if name.endswith(suffix):
            return name[: -len(suffix)].removeprefix(_PREFIX)
    return None


def merged_weights(adapters: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor],
                   scale: float, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """``{X.weight: W0 + scale · B A}`` for every layer ``X`` the adapters name.

    ``base[X.weight]`` is ``W0 (out, in)``; ``A (rank, in)``, ``B (out, rank)``; the sum is
    computed in float32 and cast to ``dtype`` (default ``W0``'s)."""
    out = {}
    for name, a in adapters.items():
        if not name.endswith(_A):
            continue
        layer = _layer(name)
        b = adapters[name[: -len(_A)] + _B]
        w0 = base[f"{layer}.weight"]
        out[f"{layer}.weight"] = (w0.float() + scale * (b.float() @ a.float())).to(dtype or w0.dtype)
    return out


def _targeted(name: str, targets: set[str]) -> bool:
    return name.endswith(".weight") and name[: -len(".weight")].rsplit(".", 1)[-1] in targets


def base_weights(model_dir: str | Path, targets: tuple[str, ...],
                 dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The starting weights of the targeted layers, read from ``model_dir``'s safetensors
    (whatever engine the generator runs: the torch engine's module or vLLM's fused one), in
    the engine's ``dtype``: a checkpoint stored in bf16 must not round every merge to bf16
    when the engine runs float32 (an update of 1e-5 on a weight of 0.02 would mostly vanish),
    and a bf16 engine keeps its copy of them at half the memory."""
    from safetensors import safe_open

    wanted, out = set(targets), {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            out |= {k: f.get_tensor(k).to(dtype) for k in f.keys() if _targeted(k, wanted)}
    if not out:
        raise ValueError(f"model.lora.targets {sorted(wanted)} name no linear layer of {model_dir}")
    return out


class AdapterMerger:
    """A generator's view of published adapters: merged weights for its plain base model.

    ``base`` holds ``W0`` of every targeted layer, kept aside: every version merges from
    ``W0``, never on top of the previous merge, and is cast to the engine's ``dtype``."""

    def __init__(self, base: Mapping[str, torch.Tensor], spec: LoraSpec, dtype: torch.dtype = torch.float32) -> None:
        self.base, self.scale, self.dtype = dict(base), spec.scale, dtype

    def __call__(self, adapters: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return merged_weights(adapters, self.base, self.scale, self.dtype)


def save_adapter_and_merged(model, state: Mapping[str, torch.Tensor], dtype: torch.dtype, directory: Path,
                            save_tokenizer: Callable[[Path], None]) -> None:
    """The adapter (``PeftModel.from_pretrained`` loads it) in ``directory``, and the merged
    model (``AutoModelForCausalLM`` loads it), with the tokenizer, in ``directory/merged``."""
    from peft import get_peft_model_state_dict

    from scalerl.models.export import cast_state, set_config_dtype

    cast = cast_state(state, dtype)
    model.save_pretrained(directory, state_dict=get_peft_model_state_dict(model, state_dict=cast))
    plain = {}
    for name, value in cast.items():
        if ".lora_" in name:
            continue
        plain[name.removeprefix(_PREFIX).replace(".base_layer.", ".")] = value
    adapters = {k: v for k, v in cast.items() if ".lora_" in k}
    scale = next(iter(model.peft_config.values())).lora_alpha / next(iter(model.peft_config.values())).r
    plain |= merged_weights(adapters, plain, scale)
    merged = directory / "merged"
    model.get_base_model().save_pretrained(merged, state_dict=plain)
    set_config_dtype(merged, dtype)
    save_tokenizer(merged)
