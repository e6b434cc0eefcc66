"""One weight sync, shared memory vs a collective group (``pipeline.weight_transport``), side by side.

A learner (this process) publishes a model of ``--params`` float32 parameters to one generator
process, which waits for each version, then copies it into its own model as an engine does
(``update_weights``). Per transport, two times:

- **learner blocked**: the seconds ``write`` holds the learner (shm: stage + copy into the
  shared tensor; collective: the sends, which the generator's thread receives while it decodes);
- **publish → loaded**: from the start of ``write`` until the generator's model holds the version
  (shm: the generator's snapshot clone + load; collective: the receive + load), the time a
  version takes to reach the sampler.

The transports run interleaved, ``--repeats`` versions each, each its own fresh generator
process; the best of each is kept (the least disturbed by other work on the machine). The
machine's parallel scaling is printed at the start, and the last line is the ratio of
shared memory's publish → loaded over the collective's.

    .venv/bin/python bench/weight_sync.py [--params 100000000] [--repeats 5]

``measure`` is what ``bench/gpu_check.py`` runs on a GPU, for each transport its placement allows.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from _workload import parallel_scaling

from scalerl.config.learner import LearnerConfig
from scalerl.pipeline.collective import CollectiveWeights
from scalerl.pipeline.weights import SharedWeights, WeightLayout, model_buckets

WIDTH = 5000  # square layers: 25M parameters each


def _model(params: int) -> torch.nn.Module:
    layers = max(1, round(params / WIDTH**2))
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])


def _generator(handle, make, device: str, versions: int, done) -> None:
    """Wait for each version, load it into a model of our own on ``device``, and say when."""
    torch.set_num_threads(1)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))  # a collective's NCCL end is on this GPU
    model = make().to(device)
    source = handle.source()
    state = dict(model.named_parameters())
    done.put(("ready", time.monotonic()))  # timing starts once this end is up, as in a run
    seen = -1
    while seen < versions - 1:
        got = source.read(seen)
        if got is None:
            time.sleep(0.0005)
            continue
        seen, tensors = got
        with torch.no_grad():
            for name, t in tensors.items():
                state[name].copy_(t)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        done.put((seen, time.monotonic()))  # CLOCK_MONOTONIC: one clock for every process here


def measure(transport: str, make, *, device: str = "cpu", generator_device: str = "cpu", repeats: int = 5,
            bucket_mb: int = 128) -> dict[str, float]:
    """Best learner-blocked and publish → loaded seconds over ``repeats`` versions of ``make()``
    (a picklable model builder) on ``device``, to one generator process on ``generator_device``."""
    model = make().to(device)
    layout = WeightLayout(model)
    ctx = torch.multiprocessing.get_context("spawn")  # its pickler carries CUDA tensors as IPC handles
    if transport == "collective":
        sink = CollectiveWeights(layout, bucket_bytes=bucket_mb << 20, timeout_s=120.0,
                                 device="cuda" if device.startswith("cuda") else "cpu")
    else:
        sink = SharedWeights(layout, ctx, device="cuda" if transport == "cuda_ipc" else "cpu")
    done = ctx.Queue()
    child = ctx.Process(target=_generator, args=(sink.handle(0), make, generator_device, repeats, done), daemon=True)
    child.start()
    blocked, loaded = [], []
    try:
        assert done.get(timeout=300)[0] == "ready"
        if transport == "collective":  # the learner's end of the group is up too
            while not sink.connected() and child.is_alive():
                time.sleep(0.05)
        for version in range(repeats):
            start = time.monotonic()
            sink.write(version, model_buckets(model, bucket_mb << 20))  # as the learner draws them
            blocked.append(time.monotonic() - start)
            seen, at = done.get(timeout=300)
            assert seen == version, (seen, version)
            loaded.append(at - start)
            with torch.no_grad():  # the next version differs (the learner stepped)
                next(model.parameters()).add_(1e-3)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
        sink.close()
    size = layout.size * 4
    return {"bytes": size, "blocked_s": min(blocked), "loaded_s": min(loaded), "gb_s": size / 1e9 / min(loaded)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=100_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bucket-mb", type=int, default=None, help="the collective's sends (default: the config's)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of both transports")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one)", flush=True)
    n = round(args.params / WIDTH**2) * WIDTH**2
    print(f"{n:,} float32 parameters ({n * 4 / 2**20:,.0f} MiB), one generator process, best of "
          f"{args.repeats} versions x {args.rounds} rounds", flush=True)
    bucket_mb = args.bucket_mb or LearnerConfig().sync_bucket_mb
    best: dict[str, dict[str, float]] = {}
    make = functools.partial(_model, args.params)
    for _ in range(args.rounds):
        for transport in ("shm", "collective"):
            got = measure(transport, make, repeats=args.repeats, bucket_mb=bucket_mb)
            old = best.get(transport, got)
            best[transport] = {k: min(old[k], got[k]) for k in ("blocked_s", "loaded_s")}
    for transport, t in best.items():
        print(f"{transport:>10}: learner blocked {t['blocked_s']:.3f} s, publish -> loaded {t['loaded_s']:.3f} s "
              f"({n * 4 / 1e9 / t['loaded_s']:.2f} GB/s)")
    shm, coll = best["shm"], best["collective"]
    print(f"publish -> loaded, shm / collective: {shm['loaded_s'] / coll['loaded_s']:.2f}x; "
          f"learner blocked, shm / collective: {shm['blocked_s'] / coll['blocked_s']:.2f}x")


if __name__ == "__main__":
    main()
