"""``scalerl plan --speeds FILE``: the speeds of a log without wall time, validated as the config is.

The file is JSON, checked by a pydantic schema (every field typed, finite and in range;
unknown keys refused), so a wrong shape is one sentence naming the field, never a traceback:

    {"seconds_per_compute": 40.0, "devices": 8,          # required
     "seconds_per_compute_sd": 4.0,                       # optional (default 0)
     "roles": {"gen_device_s": 12.0, "learner_device_s": 3.0, "sync_s": 0.5, "eval_s": 0.2,
               "generators": 6, "learner_devices": 2, "k": 8,
               "gen_device_sd": 1.5, "learner_device_sd": 0.4}}   # optional; the sds too
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scalerl.fit.errors import CurveError
from scalerl.fit.time.throughput import RoleTimes
from scalerl.fit.time.timing import Clock

__all__ = ["read_speeds"]

MAX_BYTES = 1 << 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool(cls, v, info):
        if isinstance(v, bool):  # JSON's true is no count of devices (pydantic reads it as 1)
            raise ValueError(f"{info.field_name} must be a number, not {str(v).lower()}")
        return v


class Roles(_Strict):
    """Per-step costs of the run's roles (``throughput.RoleTimes``)."""

    gen_device_s: float = Field(gt=0)
    learner_device_s: float = Field(gt=0)
    sync_s: float = Field(0.0, ge=0)
    eval_s: float = Field(0.0, ge=0)
    generators: int = Field(ge=1)
    learner_devices: int = Field(ge=1)
    k: int = Field(ge=0)
    gen_device_sd: float = Field(0.0, ge=0)
    learner_device_sd: float = Field(0.0, ge=0)


class Speeds(_Strict):
    """A log's clock: seconds of wall time per unit of its compute, and the devices."""

    seconds_per_compute: float = Field(gt=0)
    devices: float = Field(gt=0)
    seconds_per_compute_sd: float = Field(0.0, ge=0)
    roles: Roles | None = None


def _head(path: Path) -> bytes:
    """At most ``MAX_BYTES`` + 1 bytes of the regular file ``path``: a named pipe (which would
    block) or a device (``/dev/zero``: endless) is refused in one sentence before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise CurveError(f"{path} cannot be read ({err.strerror or err}).") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CurveError(f"{path} is not a regular file (a pipe, device or folder); give a speeds file.")
        return handle.read(MAX_BYTES + 1)


def read_speeds(path: Path) -> tuple[Clock, RoleTimes | None]:
    """The clock (hours count from compute 0) and, with ``roles``, the role costs of ``path``."""
    try:
        text = _head(Path(path))
        if len(text) > MAX_BYTES:
            raise CurveError(f"{path} is larger than a speeds file ({MAX_BYTES:,} bytes).")
        data = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CurveError(f"{path} is not valid JSON ({getattr(err, 'msg', err)}).") from None
    except RecursionError:
        raise CurveError(f"{path} is JSON nested too deeply to be a speeds file.") from None
    if not isinstance(data, dict):
        raise CurveError(f"{path} must hold a JSON object with seconds_per_compute and devices.")
    try:
        speeds = Speeds.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "the file"
        raise CurveError(f"{path}: {field}: {first['msg'].removeprefix('Value error, ')} "
                         "(see scalerl plan --help for the file's fields).") from None  # fmt: skip
    empty = np.array([], dtype=float)
    clock = Clock(empty, empty, speeds.seconds_per_compute, speeds.seconds_per_compute_sd, speeds.devices)
    roles = None if speeds.roles is None else RoleTimes(**speeds.roles.model_dump())
    return clock, roles
