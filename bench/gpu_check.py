"""The GPU check: CUDA tests, engine and learner throughput, the weight sync, and a rising run.

Everything a first session on a GPU needs to measure, in one process start, within 8 minutes
on one GPU, with every figure written to one JSON file (``--out``):

1. ``gpu_tests``: ``pytest -m gpu tests/gpu`` (learner and ``TorchEngine`` on CUDA), then, where
   vLLM is installed, ``vllm_tests``: the real-engine tests the CPU suite runs
   (``tests/rollout/test_vllm_engine.py``, ``tests/pipeline/test_vllm_pipeline.py``), each
   under a bound of its own, so a slow vLLM start never costs the CUDA tests' result;
2. ``engine``: ``TorchEngine`` against transformers ``generate`` at batch 64 and 256, new
   tokens/s, on the ``large`` preset (~190M parameters, built from a config: nothing is
   downloaded), bf16 body with the FP32 head;
3. ``peak``: the dense matmul throughput this device reaches in the body's dtype (the MFU
   denominator is measured here, not taken from a data sheet; the nominal H200 bf16 dense
   peak, 989 TFLOP/s, is printed beside it);
4. ``learner``: one optimiser step's trained tokens/s and MFU, ``6·N·tokens / time / peak``
   (``scalerl.compute``'s FLOP count), at the ``qwen-0.5b`` preset (Qwen2.5-0.5B's shape, the
   size users start from, its 151,936-row head in chunks) and at ``large``;
5. ``sync``: ``bench/weight_sync.py``'s publish → loaded of the 0.5 B preset for each transport
   the GPUs allow (``shm`` and ``cuda_ipc`` on one; ``collective`` over NCCL with two), GB/s and
   its share of that preset's learner step;
6. ``mismatch``: ``bench/mismatch.py``'s statistics by precision (fp32, bf16, bf16 + FP32 head,
   fp16 and fp16 + FP32 head: fp16 only where CUDA is);
7. ``pipeline``: a nano model SFT-warmed on small additions (stopped by steps), then 200
   ``pipeline-rl`` steps (``local`` backend) with an evaluation every 40: the validation pass
   rates, whether they rose, the mean ``mismatch_kl`` and the largest staleness;
8. ``learner_ranks``: the data-parallel learner (``learner.world_size``, FSDP2) on 2 GPUs when
   there are 2, else ``world_size=1`` through the same FSDP2 path on one: 10 steps' median
   step time and tokens/s, one weight sync, and the parameter and AdamW bytes rank 0 holds.

Each section is written to the JSON file as soon as it is done, and a section that fails or
runs out of its time records its error and lets the next one run, so the 8-minute bound of
``scripts/gpu_check.sh`` can cost the last figures, never all of them. Learner MFU is given
against the measured peak (``mfu``) and against the data-sheet bf16 dense peak
(``mfu_vs_nominal``).

``--dry-run`` runs the same code on whatever device there is with a tiny model and a few
steps, so the suite can prove the script works without a GPU (figures then mean nothing).

    scripts/gpu_check.sh --out gpu_check.json        # on the GPU machine
    scripts/gpu_check.sh --dry-run --out /tmp/x.json  # anywhere
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _workload import synthetic_groups  # noqa: E402
from generation import _engine_generate, _hf_generate  # noqa: E402
from mismatch import ROWS as MISMATCH_ROWS  # noqa: E402
from mismatch import measure as measure_mismatch  # noqa: E402

from scalerl.compute import matmul_peak  # noqa: E402
from scalerl.config import load_config  # noqa: E402
from scalerl.models import build_model, build_task_tokenizer, count_parameters, save_pretrained  # noqa: E402
from scalerl.pipeline import build  # noqa: E402
from scalerl.pipeline.learner.batch import prepare_batch  # noqa: E402
from scalerl.pipeline.learner.train_step import backward_and_step  # noqa: E402
from scalerl.pipeline.run import train  # noqa: E402
from scalerl.rollout.torch_engine import TorchEngine  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOMINAL_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
"""Dense bf16 tensor-core peaks from the data sheets, for context beside the measured one."""
FULL = {"preset": "large", "dtype": torch.bfloat16, "batches": [64, 256], "new_tokens": 128, "prompt_len": 32,
        "repeats": 3, "peak_n": 8192, "learner_shape": (8, 8, 512), "learner_presets": ["qwen-0.5b", "large"],
        "sync_preset": "qwen-0.5b", "sync_repeats": 3, "tests_s": 150, "vllm_tests_s": 240,
        "mismatch": {"preset": "large", "prompts": 32, "new_tokens": 48},
        "rise": {"preset": "nano", "sft_steps": 1000, "steps": 200, "every": 40, "eval_prompts": 128, "minutes": 3.0},
        "rank_steps": 10}
DRY = {"preset": "nano", "dtype": torch.float32, "batches": [4, 8], "new_tokens": 8, "prompt_len": 8,
       "repeats": 1, "peak_n": 256, "learner_shape": (2, 4, 16), "learner_presets": ["nano"],
       "sync_preset": "nano", "sync_repeats": 1, "tests_s": 150, "vllm_tests_s": 240,
       "mismatch": {"preset": "nano", "prompts": 2, "new_tokens": 4},
       "rise": {"preset": "nano", "sft_steps": 2, "steps": 2, "every": 1, "eval_prompts": 2, "minutes": 3.0},
       "rank_steps": 1}
"""``tests_s`` and ``vllm_tests_s`` bound the two test subprocesses; ``rise["minutes"]`` is the rising
run's own ``train.max_minutes``, a guard that keeps the script inside its 8 minutes (the run's
steps are the figure: a run that the guard cut says how many it did)."""


def _wall(fn, device: str) -> float:
    """Wall seconds of ``fn`` with the device drained before and after (GPU work is async)."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _median(fn, device: str, repeats: int) -> float:
    fn()  # warm-up: kernels, allocator, caches
    return statistics.median(_wall(fn, device) for _ in range(repeats))


VLLM_TESTS = ("tests/rollout/test_vllm_engine.py", "tests/pipeline/test_vllm_pipeline.py")


def gpu_tests(seconds: float, args=("-m", "gpu", "tests/gpu")) -> dict:
    """Run the tests ``args`` select, for at most ``seconds``; their summary line and exit status."""
    # its own session, so a timeout takes the tests' own children (pipeline generators holding
    # the GPU) down with it
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    lines = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|skipped|failed|error)", ln)]
    return {"returncode": proc.returncode, "summary": lines[-1].strip("= ") if lines else out[-300:]}


def engine_throughput(model, tokenizer, p: dict, device: str) -> list[dict]:
    """New tokens/s of ``TorchEngine`` (FP32 head) and of ``model.generate``, per batch size."""
    engine = TorchEngine(model, tokenizer, eos_token_ids=(), fp32_head=True, device=device)
    rows = []
    for batch in p["batches"]:
        prompts = torch.randint(5, len(tokenizer), (batch, p["prompt_len"]), device=device)
        ours = _median(_engine_generate(engine, prompts.cpu(), p["new_tokens"]), device, p["repeats"])
        theirs = _median(_hf_generate(model, prompts, p["new_tokens"]), device, p["repeats"])
        tokens = batch * p["new_tokens"]
        rows.append({"batch": batch, "engine_tok_s": tokens / ours, "generate_tok_s": tokens / theirs,
                     "engine_over_generate": theirs / ours})
    return rows


def learner_throughput(model, tokenizer, p: dict, device: str, peak: float | None, nominal: float | None) -> dict:
    """Trained tokens/s and MFU of one optimiser step on P × G synthetic completions."""
    P, G, length = p["learner_shape"]
    bf16 = model.dtype == torch.bfloat16  # the learner trains float32 masters under bf16 autocast
    cfg = load_config("scalerl", ["optim.micro_batch=8", "filters.zero_variance=false"]
                      + (["model.dtype=bfloat16"] if bf16 else []))
    model = copy.deepcopy(model).float() if bf16 else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    groups = synthetic_groups(P, G, length, len(tokenizer))
    tokens = {}

    def step():
        batch = prepare_batch(groups, build.batch_rules(cfg), 0, tokenizer.pad_token_id)
        tokens["n"] = backward_and_step(model, opt, sched, batch, build.step_rules(cfg),
                                        tokenizer.pad_token_id)["step_trained_tokens"]

    seconds = _median(step, device, p["repeats"])
    flops = 6 * count_parameters(model) * tokens["n"] / seconds
    return {"shape": [P, G, length], "step_s": seconds, "trained_tok_s": tokens["n"] / seconds, "flop_s": flops,
            "mfu": flops / peak if peak else None,
            "mfu_vs_nominal": flops / nominal if nominal else None}


def learner_presets(tokenizer, p: dict, device: str, peak: float | None, nominal: float | None) -> dict:
    """:func:`learner_throughput` at each of ``p["learner_presets"]`` (the 0.5 B one first: the
    size users start from), each model built from its config and freed before the next."""
    out = {}
    for preset in p["learner_presets"]:
        model = build_model(preset, len(tokenizer), arch="qwen2", tokenizer=tokenizer, dtype=p["dtype"]).to(device)
        out[preset] = {"params": count_parameters(model)} | learner_throughput(model, tokenizer, p, device, peak, nominal)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def sync_transports(tokenizer, p: dict, device: str, step_s: float | None) -> dict:
    """``bench/weight_sync.py``'s publish → loaded at ``p["sync_preset"]`` for every transport
    this placement allows (``pipeline.weight_transport``): GB/s and its share of a learner step."""
    from weight_sync import measure

    gpus = torch.cuda.device_count() if device == "cuda" else 0
    make = functools.partial(build_model, p["sync_preset"], len(tokenizer), arch="qwen2", tokenizer=tokenizer)
    places = {"shm": (device, device)}  # GPU → host → shared memory → host → GPU on one GPU
    if gpus:
        places["cuda_ipc"] = ("cuda:0", "cuda:0")  # the roles share the learner's GPU
    if gpus >= 2 or not gpus:
        places["collective"] = ("cuda:0", "cuda:1") if gpus else ("cpu", "cpu")  # NCCL needs a GPU each
    out = {}
    for name, (learner_on, generator_on) in places.items():
        got = measure(name, make, device=learner_on, generator_device=generator_on, repeats=p["sync_repeats"])
        out[name] = got | {"share_of_step": got["loaded_s"] / step_s if step_s else None}
    return out


def rising_run(p: dict, device: str, dry: bool) -> dict:
    """An SFT-warmed model (stopped by steps), then ``rise["steps"]`` pipeline-rl steps on the
    built-in addition task: the validation pass rate at each evaluation, which must rise."""
    from scalerl.data.tasks import get_task
    from scalerl.pipeline.sft import SFTSpec, sft_warmup

    r = p["rise"]
    tokenizer = build_task_tokenizer()
    task = {"min_digits": 1, "max_digits": 2}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(r["preset"], len(tokenizer), seed=0, tokenizer=tokenizer).to(device)
        sft_warmup(get_task("addition", **task), model, tokenizer, SFTSpec((0.15, 0.4), max_steps=r["sft_steps"], seed=0),
                   output_dir=Path(tmp) / "warm")
        cfg = load_config("scalerl", [
            f"model.base={Path(tmp) / 'warm'}", f"train.device={device}", "pipeline.backend=local",
            "pipeline.mode=pipeline-rl", "task.knobs={min_digits: 1, max_digits: 2}", f"train.steps={r['steps']}",
            f"eval.every={r['every']}", "eval.schedule=every", f"eval.num_prompts={r['eval_prompts']}",
            "optim.lr=2e-4", "optim.warmup_steps=5", "pipeline.prompts_per_step=8", "pipeline.generations=8",
            "log.progress=false", "log.tensorboard=false", "train.checkpoint_every=1000",
            f"train.max_minutes={r['minutes']}"] + (["pipeline.prompts_per_step=2", "pipeline.generations=2"] if dry else []))
        start = time.perf_counter()
        train(cfg, Path(tmp) / "run", log=lambda *_: None)
        wall = time.perf_counter() - start
        records = read_records(Path(tmp) / "run" / "metrics.jsonl")
    val = [r["val_pass_rate"] for r in records if r.get("val_pass_rate") is not None]
    trained = [r for r in records if "grad_norm" in r]
    # a step with nothing measured logs NaN, which JSONL reads back as None; none measured: None
    # (JSON has no NaN: a strict reader of the report, jq or a browser, refuses the whole file)
    kl = [r["mismatch_kl"] for r in trained if r.get("mismatch_kl") is not None]
    return {"steps": len(trained), "wall_s": wall, "steps_per_s": len(trained) / wall, "val_pass_rate": val,
            "rose": len(val) >= 2 and val[-1] > val[0],
            "mismatch_kl_mean": float(np.mean(kl)) if kl else None,
            "staleness_max": max(r["staleness_max"] for r in trained)}


def learner_ranks(p: dict, model_dir: Path, device: str, dry: bool) -> dict:
    """The FSDP2 learner ranks on ``p["learner_shape"]``: step time, tokens/s, sync, memory."""
    from scalerl.models import load_pretrained
    from scalerl.pipeline.learner.group import ShardedLearner, free_port
    from scalerl.pipeline.learner.rank import RankSpec
    from scalerl.pipeline.weights import InProcessWeights

    world = 1 if device == "cpu" else min(2, torch.cuda.device_count())
    cfg = load_config("scalerl", ["optim.micro_batch=8", "filters.zero_variance=false"]
                      + ([] if dry else ["model.dtype=bfloat16"]))
    template, tokenizer = load_pretrained(model_dir)
    rules = build.learner_rules(cfg, tokenizer.pad_token_id)
    spec = RankSpec(model_dir=str(model_dir), rules=rules, strategy="fsdp2", world=world, device=device,
                    dtype="float32", lora=None, threads=1, bucket_bytes=512 << 20, master_addr="127.0.0.1",
                    master_port=free_port(), seed=0, timeout_s=600)
    peak = matmul_peak(device, torch.bfloat16 if rules.step.autocast else torch.float32)
    learner = ShardedLearner(spec, template, transport="local", peak_flop_s=peak, sync_timeout_s=120)
    learner.start(InProcessWeights())
    try:
        groups = synthetic_groups(*p["learner_shape"], len(tokenizer))
        times, metrics = [], {}
        for i in range(p["rank_steps"] + 1):  # the first warms up
            start = time.perf_counter()
            metrics = learner.step(groups).metrics
            if i:
                times.append(time.perf_counter() - start)
        synced, memory = learner.publish(), learner.memory()
    finally:
        learner.close()
    step_s = statistics.median(times)
    return {"world_size": world, "strategy": "fsdp2", "step_s": step_s,
            "trained_tok_s": metrics["step_trained_tokens"] / step_s, "learner_mfu": metrics["learner_mfu"],
            "sync_s": synced.seconds, "sync_bytes": synced.bytes, "rank0": memory[0]}


def mismatch_by_precision(p: dict, device: str) -> dict:
    """``bench/mismatch.py``'s rows on this device (fp16 only on CUDA)."""
    args = SimpleNamespace(model=None, head_scale=10.0, seed=0, **p["mismatch"])
    return {name: measure_mismatch(args, dtype, head, device) for name, dtype, head in MISMATCH_ROWS
            if dtype != torch.float16 or device == "cuda"}


def _section(report: dict, key: str, out: Path, fn) -> None:
    """``report[key] = fn()``, or its error; the JSON file is rewritten after every section."""
    start = time.perf_counter()
    try:
        report[key] = fn()
    except Exception as err:  # noqa: BLE001 - one broken section must not cost the others
        report[key] = {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-2000:]}
    report.setdefault("section_s", {})[key] = round(time.perf_counter() - start, 2)
    out.write_text(json.dumps(report, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny model, few steps, any device")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.dry_run:
        sys.exit("gpu_check: no CUDA device is visible; run with --dry-run to check the script on CPU")
    p = DRY if args.dry_run else FULL
    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    report: dict = {"device": name, "torch": torch.__version__, "dry_run": args.dry_run, "preset": p["preset"],
                    "nominal_peak_flop_s": next((v for k, v in NOMINAL_PEAK.items() if k in name), None)}
    _section(report, "gpu_tests", args.out, lambda: gpu_tests(p["tests_s"]))
    tokenizer = build_task_tokenizer()
    model = build_model(p["preset"], len(tokenizer), tokenizer=tokenizer, dtype=p["dtype"]).to(device)
    report["params"] = count_parameters(model)
    _section(report, "engine", args.out, lambda: engine_throughput(model, tokenizer, p, device))
    _section(report, "peak_flop_s", args.out,
             lambda: matmul_peak(device, p["dtype"], n=p["peak_n"], repeats=max(3, p["repeats"])))
    peak = report["peak_flop_s"] if isinstance(report["peak_flop_s"], float) else None
    _section(report, "learner", args.out,
             lambda: learner_presets(tokenizer, p, device, peak, report["nominal_peak_flop_s"]))
    first = report["learner"].get(p["learner_presets"][0], {}) if "error" not in report["learner"] else {}
    _section(report, "sync", args.out, lambda: sync_transports(tokenizer, p, device, first.get("step_s")))
    _section(report, "mismatch", args.out, lambda: mismatch_by_precision(p, device))
    _section(report, "pipeline", args.out, lambda: rising_run(p, device, args.dry_run))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_pretrained(model.float().cpu(), tokenizer, Path(tmp) / "model")
        _section(report, "learner_ranks", args.out, lambda: learner_ranks(p, model_dir, device, args.dry_run))
    if importlib.util.find_spec("vllm") is not None and device == "cuda":  # last: it can cost only itself
        _section(report, "vllm_tests", args.out, lambda: gpu_tests(p["vllm_tests_s"], VLLM_TESTS))
    print(json.dumps(report, indent=1))
    failed = [k for k, v in report.items() if isinstance(v, dict) and "error" in v]
    if failed:
        sys.exit(f"gpu_check: {', '.join(failed)} failed; the others' figures are in {args.out}")


if __name__ == "__main__":
    main()
