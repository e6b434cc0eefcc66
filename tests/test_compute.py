"""Compute accounting: device-hours across resumes and the 2N/6N FLOPs estimate."""

from __future__ import annotations

import time

import pytest

from scalerl.compute import ComputeMeter, TokenRates


def test_flops_are_2n_per_generated_and_6n_per_trained_token():
    meter = ComputeMeter(devices=2, n_params=1000)
    meter.add_generation(30)  # 2 · 1000 · 30 = 60_000
    meter.add_training(10)  # 6 · 1000 · 10 = 60_000
    assert meter.flops == 120_000


class FakeClock:
    """A clock that moves only when told: wall-time figures are exact, whatever the load."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_device_hours_scale_with_devices_and_survive_a_resume():
    clock = FakeClock()
    meter = ComputeMeter(devices=2, n_params=1, clock=clock)
    clock.t += 90.0  # 90 s on 2 devices = 0.05 device-hours
    assert meter.wall_s == 90.0 and meter.device_hours == pytest.approx(2 * 90.0 / 3600, rel=1e-12)
    state = meter.state_dict()
    assert state["wall_s"] == 90.0 and state["device_hours"] == pytest.approx(0.05, rel=1e-12)
    resumed = ComputeMeter(devices=2, n_params=1, clock=clock)
    resumed.load_state_dict(state)
    clock.t += 36.0  # the resumed segment adds its own 36 s x 2 devices = 0.02 device-hours
    assert resumed.wall_s == pytest.approx(126.0, rel=1e-12)
    snap = resumed.snapshot()
    assert set(snap) == {"compute_gpu_hours", "flops", "wall_s", "total_gen_tokens", "total_trained_tokens"}
    assert snap["compute_gpu_hours"] == pytest.approx(0.07, rel=1e-12)


def test_the_default_clock_is_the_wall_clock():
    meter = ComputeMeter(devices=2, n_params=1)
    time.sleep(0.01)
    # only bounds: a busy machine may stretch the sleep, never shrink it
    assert meter.wall_s >= 0.005 and meter.device_hours >= 2 * 0.005 / 3600


def _snap(wall_s: float, gen: int, trained: int) -> dict:
    return {"wall_s": wall_s, "total_gen_tokens": gen, "total_trained_tokens": trained}


def test_token_rates_are_means_over_the_last_window_of_steps():
    rates = TokenRates(_snap(0.0, 0, 0), window=2)
    assert rates(_snap(2.0, 400, 40)) == {"gen_tokens_per_s": 200.0, "trained_tokens_per_s": 20.0}
    # groups arrive in bursts: a step that received none does not read 0 ...
    assert rates(_snap(4.0, 400, 80)) == {"gen_tokens_per_s": 100.0, "trained_tokens_per_s": 20.0}
    # ... and the step after it is not credited with the burst alone: over steps 2-3 only
    assert rates(_snap(6.0, 1200, 120)) == {"gen_tokens_per_s": 200.0, "trained_tokens_per_s": 20.0}


def test_matmul_peak_is_positive_and_takes_a_device_object():
    import torch

    from scalerl.compute import matmul_peak

    assert matmul_peak("cpu", n=64, repeats=2) > 0
    assert matmul_peak(torch.device("cpu"), n=64, repeats=1) > 0  # no CUDA synchronize on the CPU


def test_a_resume_with_fewer_devices_adds_at_its_own_rate_and_never_rewrites_the_past():
    state = {"wall_s": 3600.0, "device_hours": 9.0, "gen_tokens": 0, "train_tokens": 0}  # 9 devices for an hour
    resumed = ComputeMeter(devices=2, n_params=1)
    resumed.load_state_dict(state)
    assert 9.0 <= resumed.device_hours < 9.0 + 2 * 60 / 3600  # not 2 × (1 h + ε)
    old = ComputeMeter(devices=2, n_params=1)  # a checkpoint from before device-hours were stored
    old.load_state_dict({"wall_s": 1800.0, "gen_tokens": 0, "train_tokens": 0})
    assert old.device_hours == pytest.approx(1.0, abs=1e-3)
