"""A run folder, in one place: its file names, its record keys, its one reader and its state.

``scalerl train --out RUN`` writes a run folder; ``fit``, ``plan``, ``serve``, ``sweep`` and
``report`` read it. Everything both sides must agree on is defined here, once, as plain
strings and small functions (this module imports nothing of the package, so ``fit/`` may
read it and stay free of torch and the trainer). ``docs/run-folder.md`` says what each key
counts, in which unit.

**The one JSONL reader** (:func:`read_records`), one policy for a torn line: a last line
without its newline that does not parse is a record a live writer is still appending, and is
skipped; any other line that is not one JSON object (bad JSON, a list, nesting past the
parser's depth, bytes that are not UTF-8) is :class:`BadRunFile` naming the file and line.
Keys renamed since a run was written (:data:`RENAMED`) are read under their current names.

**A run's state** (:func:`run_state`) is what the run itself wrote last in ``status.json``
(:func:`write_status`: the trainer when it starts, ends, stops on a signal or fails; a study
when it pauses a point between rungs or stops it), checked against the process still
writing: a status of ``running`` whose files have not changed for :data:`LIVE_S` seconds is a
process that is gone, so the run is ``paused`` (resumable). A folder written before the
status file existed, or by another trainer, gets its state from its records and
``train.log`` (:func:`_inferred`).
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

# --- file names ---------------------------------------------------------------------------
METRICS = "metrics.jsonl"  # one record per optimiser step; evaluations add the validation
CONFIG = "config.yaml"  # the resolved config the run trained with
STATUS = "status.json"  # the run's state as it last wrote it (write_status)
TRAIN_LOG = "train.log"  # the console's lines
SAMPLES = "samples.jsonl"  # a few completions per evaluation
PLACEMENT = "plan.json"  # where every role ran (the run plan)
REPORT = "report.md"  # the end-of-run report
FIT_FIGURE = "fit.png"
SFT_RESULT = "sft_result.json"  # beside a warmed-up starting model: the pass rate it reached
CHECKPOINT = "checkpoint"  # the newest checkpoint (``scalerl.checkpoint``), and the two below
CHECKPOINT_OLD = "checkpoint.old"
CHECKPOINT_BROKEN = "checkpoint.broken"
TENSORBOARD = "tb"
MODEL = "model"
SWEEP = "sweep.yaml"  # a study's spec
DECISIONS = "decisions.json"  # an adaptive study's decisions
STUDY = "study.md"  # a study's report
SHARED_BASE = "_base"  # a study's shared starting models
BASE_MODEL = "base_model"  # a run's SFT-warmed starting model
WANDB = "wandb"  # the W&B library's local folder of a run that logs to it (``log.wandb``): a copy of its log
NOT_RUNS = (SHARED_BASE, BASE_MODEL, CHECKPOINT, CHECKPOINT_OLD, CHECKPOINT_BROKEN, MODEL, TENSORBOARD, WANDB)
"""Folders inside a run or study that hold no run of their own (``walk`` passes them by there
only: another trainer's ``tb/`` or ``model/`` elsewhere may hold its log)."""

# --- record keys: every record ------------------------------------------------------------
STEP = "step"
COMPUTE = "compute_gpu_hours"  # device-hours so far: the law's x
WALL = "wall_s"  # seconds since the run started: the clock of the time to target
# evaluation records
VAL_PASS_RATE = "val_pass_rate"  # the law's y
VAL_REWARD_MEAN = "val_reward_mean"
VAL_STDERR = "val_stderr"  # the evaluation's standard error over prompts
TRAIN_REWARD = "reward_mean"  # a step's mean training reward: the forecast's companion
STOPPED_EARLY = "stopped_early"  # the sentence of a rule that ended the run
# step records: the learner's role times
LEARNER_BUSY = "learner_busy_s"
LEARNER_WORLD_SIZE = "learner_world_size"
LEARNER_EVAL = "learner_eval_s"
PUBLISH = "publish_s"
SYNC = "sync_s"
GENERATOR_TIMES = MappingProxyType({
    "cpu_s": "generator_cpu_s",
    "eval_cpu_s": "generator_eval_cpu_s",
    "stall_s": "generator_stall_s",
    "swap_s": "generator_swap_s",
    "idle_s": "generator_idle_s",
})
"""``types.GeneratorTimes`` field -> key (summed over a batch's groups)."""
GENERATOR_STALL = GENERATOR_TIMES["stall_s"]
GENERATOR_IDLE = GENERATOR_TIMES["idle_s"]
TOTAL_GEN_TOKENS = "total_gen_tokens"
TOTAL_TRAINED_TOKENS = "total_trained_tokens"
STALENESS_HIST = "staleness_hist"  # {versions behind: groups}

RENAMED = MappingProxyType({
    "gen_tokens": TOTAL_GEN_TOKENS,
    "train_tokens": TOTAL_TRAINED_TOKENS,
    "trained_tokens": "step_trained_tokens",
    "padded_tokens": "step_padded_tokens",
    "train_tokens_per_s": "trained_tokens_per_s",
})
"""Keys renamed since a run may have been written, old name -> current name (``train_tokens``
was cumulative and ``trained_tokens`` per step). Runs written before keep them on disk."""


class Forecast:
    """The ``forecast_*`` keys of the live forecast's records (``fit.forecast.record``)."""

    STEP = "forecast_step"  # the evaluation it was made at
    METRIC = "forecast_metric"  # the fitted column
    CUT = "forecast_fit_until"  # the compute of that evaluation
    BUDGET = "forecast_budget"  # the compute the run will have spent at its end
    STATE = "forecast_state"  # rising, early, not_learning, too_few_evaluations, declining, diverging
    SAID = "forecast_state_message"  # the state in one sentence
    METHOD = "forecast_method"  # whose curve the draws follow
    WHY = "forecast_method_why"
    A, A_LO, A_HI = "forecast_A", "forecast_A_lo", "forecast_A_hi"
    IDENTIFIED = "forecast_identified"
    VERDICT = "forecast_verdict"
    FINAL, FINAL_LO, FINAL_HI = "forecast_final", "forecast_final_lo", "forecast_final_hi"  # one evaluation
    BAND_LO, BAND_HI = "forecast_band_lo", "forecast_band_hi"  # the expected curve at the budget
    UNCALIBRATED = "forecast_uncalibrated"  # why its intervals could not be checked (None: they were)
    RISE_Z, RISE_FIRST, RISE_LAST = "forecast_rise_z", "forecast_rise_first", "forecast_rise_last"
    TARGET = "forecast_target"
    COMPUTE_TO_TARGET = "forecast_compute_to_target"
    COMPUTE_TO_TARGET_LO, COMPUTE_TO_TARGET_HI = "forecast_compute_to_target_lo", "forecast_compute_to_target_hi"
    HOURS, HOURS_LO, HOURS_HI = "forecast_time_to_target_h", "forecast_time_to_target_h_lo", "forecast_time_to_target_h_hi"
    P_REACH = "forecast_p_reach"  # within the budget
    ERROR = "forecast_error"  # a forecast that failed: one sentence


FORECAST_KEYS = tuple(v for k, v in vars(Forecast).items() if k.isupper())
"""Every ``forecast_*`` key, in the order :class:`Forecast` names them."""

# --- reading ------------------------------------------------------------------------------


class BadRunFile(ValueError):
    """A run folder's file that cannot be read as one; the message is one sentence naming it."""


MAX_LINE = 1 << 20
"""A record longer than this (1 MiB) is not one the trainer writes."""


def current_names(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every key of :data:`RENAMED` under its current name."""
    return {RENAMED.get(key, key): value for key, value in record.items()}


def old_name(key: str) -> str | None:
    """The name a run written before a rename used for ``key`` (:data:`RENAMED`), or None."""
    return next((old for old, new in RENAMED.items() if new == key), None)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSONL file, in order (the module docstring's one policy); an absent
    file has none."""
    return [record for _, record in read_numbered(path)]


def read_numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every record of a JSONL file (:func:`read_records`), read a
    line at a time: memory holds the records, never the file (a 2 GB sparse log once filled it)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return _parse_lines(handle, path)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise BadRunFile(f"{path} cannot be read ({err.strerror or err}).") from None


def parse_records(data: bytes, path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of JSONL ``data`` read from ``path`` (the one policy; ``path``
    names the file in messages)."""
    return _parse_lines(io.BytesIO(data), path)


def _parse_lines(handle: BinaryIO, path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """The one policy over a binary stream: binary data in the first 8 KiB is refused; a
    byte-order mark is dropped; blank lines are skipped; a torn last line (no newline after it)
    is a record a live writer is still appending, skipped if it does not parse; a line longer
    than ``MAX_LINE`` is skipped to its end unread (refused where a newline ends it: no record a
    run writes is that long); any other bad line is one sentence naming it."""
    records, number, seen = [], 0, 0
    while True:
        raw = handle.readline(MAX_LINE + 2)
        if not raw:
            return records
        number += 1
        if seen < 8192 and b"\0" in raw[: 8192 - seen]:
            raise BadRunFile(f"{path} is not a JSONL log: it holds binary data.")
        seen += len(raw)
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
            raw = raw[3:]
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            length, ended = _skip_line(handle, len(raw))
            if ended:
                raise BadRunFile(f"{path} line {number} is {length:,} bytes long, more than any record a run writes.")
            return records  # a torn last line, and an overlong one: no record
        if raw.endswith(b"\n"):
            if raw.strip():
                records.append((number, _record(path, number, raw)))
        elif raw.strip():
            try:
                records.append((number, _record(path, number, raw)))
            except BadRunFile:
                pass  # a record a live writer is still appending


def _skip_line(handle: BinaryIO, read: int) -> tuple[int, bool]:
    """Read past the rest of an overlong line a chunk at a time: (its length, whether a newline ended it)."""
    while True:
        more = handle.readline(1 << 20)
        read += len(more)
        if not more:
            return read, False
        if more.endswith(b"\n"):
            return read, True


def _not_text(where: object, err: UnicodeDecodeError) -> BadRunFile:
    return BadRunFile(f"{where} is not UTF-8 text (byte 0x{err.object[err.start]:02x}).")


def _record(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    where = f"{path} line {number}"
    if len(raw) > MAX_LINE:
        raise BadRunFile(f"{where} is {len(raw):,} bytes long, more than any record a run writes.")
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise _not_text(where, err) from None
    except json.JSONDecodeError as err:
        raise BadRunFile(f"{where} is not valid JSON ({err.msg}).") from None
    except RecursionError:
        raise BadRunFile(f"{where} is JSON nested too deeply to be a record.") from None
    if not isinstance(value, dict):
        raise BadRunFile(f"{where} is not a JSON object.")
    return current_names(value)


def number(record: dict[str, Any], key: str) -> float | None:
    """``record[key]`` as a finite float, None where absent or not a number (a bool, a string)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def read_config(folder: str | Path, max_bytes: int = 1 << 20) -> dict[str, Any]:
    """The run's ``config.yaml`` as plain data ({} where absent); bounded (``yaml_io``: aliases,
    nesting, size) so an untrusted folder cannot stall a reader. :class:`BadRunFile` otherwise."""
    path = Path(folder) / CONFIG
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadRunFile(f"{path} is {size:,} bytes, more than a run's config ({max_bytes:,}).")
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise BadRunFile(f"{path} cannot be read ({err.strerror or err}).") from None
    return parse_config(raw, path)


def parse_config(raw: bytes, path: str | Path) -> dict[str, Any]:
    """A ``config.yaml``'s bytes as plain data (:func:`read_config`)."""
    import yaml

    from scalerl.yaml_io import load_yaml

    try:
        data = load_yaml(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise _not_text(path, err) from None
    except yaml.YAMLError as err:
        raise BadRunFile(f"{path} is not a config ({getattr(err, 'problem', None) or err}).") from None
    except RecursionError:
        raise BadRunFile(f"{path} nests too deeply to be a config.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadRunFile(f"{path} does not hold a mapping of config sections.")
    return data


def section(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """``cfg[name]`` where it is a mapping, else {} (an untrusted config may hold anything)."""
    value = cfg.get(name)
    return value if isinstance(value, dict) else {}


def setting(cfg: dict[str, Any], name: str, key: str) -> float | None:
    """A numeric setting ``cfg[name][key]``, None where absent or not a number."""
    return number(section(cfg, name), key)


def compute_unit(placement: dict[str, Any] | None) -> str:
    """The unit of the run's ``compute_gpu_hours`` in words, from its ``plan.json``: a device is
    a GPU where the run was accelerated and a CPU core where not (``scalerl.compute``), so the
    same column is GPU-hours on one machine and core-hours on another; a folder another trainer's
    callback wrote names its own (``integrations.trl``: steps, tokens, samples or device-hours)."""
    plan = placement.get("plan") if isinstance(placement, dict) else None
    if not isinstance(plan, dict):
        return "device-hours"
    if isinstance(plan.get("unit"), str) and plan["unit"] in ("steps", "tokens", "samples", "device-hours"):
        return plan["unit"]  # another trainer's run folder: its x as its callback logged it
    accelerated = plan.get("accelerated")
    if accelerated is None:
        accelerated = str(plan.get("device", "")).startswith("cuda")
    return "GPU-hours" if accelerated else "core-hours"


def read_placement(folder: str | Path) -> dict[str, Any]:
    """A run folder's ``plan.json`` as plain data ({} where absent or unreadable)."""
    try:
        placement = json.loads(_read_bytes(Path(folder) / PLACEMENT, 1 << 20).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return placement if isinstance(placement, dict) else {}


def run_unit(folder: str | Path) -> str:
    """The unit of a run folder's compute in words (:func:`compute_unit` of its ``plan.json``;
    "device-hours" where it has none or it cannot be read)."""
    return compute_unit(read_placement(folder) or None)


def run_folders(root: str | Path, limit: int | None = None) -> list[Path]:
    """Every run folder under ``root`` (``root`` itself where it is one), sorted: a folder holding
    :data:`METRICS`, never inside what holds no run (:data:`NOT_RUNS`, hidden folders) and never
    through a symbolic link; at most ``limit``. The one discovery of runs (``serve``, a study's
    report, a replay, an adaptive study's figure)."""
    root = Path(root)
    if is_run(root):
        return [root]
    found = []
    for folder, files in walk(root):
        if METRICS in files:
            found.append(folder)
            if limit is not None and len(found) >= limit:
                break
    return sorted(found)


def walk(root: str | Path):
    """(folder, its file names) of every folder under ``root`` a run or a study may be, in
    sorted order: never into a hidden folder or through a link, and never into :data:`NOT_RUNS`
    inside a run or a study (a folder holding :data:`METRICS` or :data:`SWEEP`), where they are
    its own; elsewhere such a name is another trainer's folder (TensorBoard's ``tb/``)."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        ours = METRICS in files or SWEEP in files
        dirs[:] = sorted(d for d in dirs if not (ours and d in NOT_RUNS) and not d.startswith("."))
        yield Path(folder), set(files)


def ended(records: list[dict[str, Any]], cfg: dict[str, Any]) -> RunState | None:
    """How a run ended, from its records and config alone, None while it has not: stopped by a
    rule (its ``stopped_early`` sentence), or finished at ``train.steps`` or ``train.max_compute``.
    The one definition of "finished" (``run_state``, a sweep that skips what is done)."""
    stop = next((r[STOPPED_EARLY] for r in records if STOPPED_EARLY in r), None)
    if stop is not None:
        return RunState("stopped", str(stop))
    last = records[-1] if records else {}
    steps, max_compute = setting(cfg, "train", "steps"), setting(cfg, "train", "max_compute")
    if last and ((steps is not None and number(last, STEP) == steps)
                 or (max_compute is not None and (number(last, COMPUTE) or 0.0) >= max_compute)):  # fmt: skip
        return RunState("finished")
    return None


def is_run(folder: Path) -> bool:
    """A folder a run wrote (it holds :data:`METRICS`); False for one this user cannot read."""
    try:
        return (Path(folder) / METRICS).is_file()
    except OSError:  # a folder we may not enter: not a run we can read
        return False


# --- the run's state --------------------------------------------------------------------------

STATES = ("running", "finished", "stopped", "failed", "paused", "unreadable")
LIVE_S = 120.0
"""A run whose files changed this recently still has a process writing them."""


@dataclass(frozen=True)
class RunState:
    """One of :data:`STATES` and what the run said about it (the signal, the error's first line)."""

    state: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.state} ({self.detail})" if self.detail else self.state


def write_status(folder: str | Path, state: str, detail: str = "", **info: Any) -> None:
    """Write ``status.json`` atomically: ``state`` (one of :data:`STATES`), one line of
    ``detail``, and plain ``info`` (step, signal, pid)."""
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}")
    path = Path(folder) / STATUS
    body = {"state": state, "detail": detail.splitlines()[0] if detail else "", "time": time.time(),
            "pid": os.getpid(), **info}  # fmt: skip
    tmp = path.with_name(f".{STATUS}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body) + "\n")
    os.replace(tmp, path)


def _read_bytes(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``, its tail when longer (FileNotFoundError where absent)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - limit, 0))
        return handle.read(limit)


def read_status(folder: str | Path, read=_read_bytes) -> dict[str, Any] | None:
    """``status.json`` as written, None where absent or unreadable; ``read(path, limit)`` reads
    a file's bytes (``serve`` passes its guarded reader)."""
    try:
        data = json.loads(read(Path(folder) / STATUS, 1 << 16).decode("utf-8"))
    except (OSError, ValueError, RecursionError, BadRunFile):
        return None
    return data if isinstance(data, dict) and data.get("state") in STATES else None


def _alive(status: dict[str, Any]) -> bool:
    """Whether the process that wrote ``status.json`` (its ``pid`` on its ``host``) still runs
    on this machine: a run slow to log (a long evaluation, a big model's step) is not paused."""
    pid, host = status.get("pid"), status.get("host")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or host != os.uname().nodename:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (OverflowError, OSError):  # gone, or not a pid at all
        return False
    return True


def _quiet_for(folder: Path, status: dict[str, Any], now: float) -> str:
    """How long ago the run last wrote, in words: from ``status.json``'s ``time`` where it is a
    plausible past moment (an untrusted file may hold a string, null, NaN, 1e400 or the year
    33658), else from its files' last change."""
    t = number(status, "time")
    if t is None or not 0.0 <= now - t < 10 * 365 * 86400.0:
        times = []
        for name in (METRICS, STATUS, TRAIN_LOG):
            try:
                times.append((folder / name).lstat().st_mtime)
            except OSError:
                continue
        t = max(times, default=None)
    return "a while ago" if t is None or not now >= t else f"{int(now - t)} s ago"


def _changed_within(folder: Path, seconds: float, now: float) -> bool:
    for name in (METRICS, STATUS, TRAIN_LOG):
        try:
            if now - (folder / name).lstat().st_mtime < seconds:
                return True
        except OSError:
            continue
    return False


def run_state(folder: str | Path, records: list[dict[str, Any]] | None = None, cfg: dict[str, Any] | None = None,
              now: float | None = None, read=_read_bytes) -> RunState:
    """The run's state (module docstring); ``records`` and ``cfg`` when the caller has them;
    ``read(path, limit)`` reads a file's bytes (``read_status``)."""
    folder = Path(folder)
    now = time.time() if now is None else now
    status = read_status(folder, read)
    if status is not None:
        state, detail = status["state"], str(status.get("detail") or "")
        if state == "running" and not _changed_within(folder, LIVE_S, now) and not _alive(status):
            return RunState("paused", f"its process stopped writing {_quiet_for(folder, status, now)}")
        return RunState(state, detail)
    records = read_records(folder / METRICS) if records is None else records
    return _inferred(folder, records, read_config(folder) if cfg is None else cfg, now, read)


def _inferred(folder: Path, records: list[dict[str, Any]], cfg: dict[str, Any], now: float, read) -> RunState:
    """A folder without ``status.json``: stopped by a rule, finished at its steps or compute,
    running while it changes, failed where its log ends with an error, else paused."""
    done = ended(records, cfg)
    if done is not None:
        return done
    if _changed_within(folder, LIVE_S, now):
        return RunState("running")
    try:
        tail = read(folder / TRAIN_LOG, 4096).decode("utf-8", "replace").strip().splitlines()[-5:]
    except (OSError, BadRunFile):
        tail = []
    error = next((t for t in reversed(tail) if t.startswith(("scalerl train:", "Traceback"))
                  or "Error" in t.split(":")[0]), None)  # fmt: skip
    if error is not None:
        return RunState("failed", error)
    return RunState("paused")
