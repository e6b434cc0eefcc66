"""The console's progress: plain lines on a schedule when stdout is not a terminal, driven
here by a fake clock (no sleeps, no wall-clock bounds)."""

from __future__ import annotations

from scalerl.progress import ProgressBar, ProgressLines, duration, progress_sink


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _lines(every_s: float, total: int = 100, start: int = 0):
    clock, out = Clock(), []
    sink = ProgressLines(total, start, "demo", every_s, clock=clock, emit=out.append, ticker=False)
    return sink, clock, out


def _record(step: int, wall_s: float, **extra) -> dict:
    return {"step": step, "wall_s": wall_s, "reward_mean": -0.5, "gen_tokens_per_s": 912.4, **extra}


def test_a_line_at_most_every_interval_as_records_arrive_with_every_field():
    sink, clock, out = _lines(30.0)
    sink.write(_record(0, 0.0, val_pass_rate=0.15))
    assert len(out) == 1  # the first record is shown at once
    clock.t += 10
    sink.write(_record(1, 10.0))
    assert len(out) == 1  # 10 s after the last line: not yet
    clock.t += 25
    sink.write(_record(3, 30.0))
    assert len(out) == 2
    # pace from the steps' own wall time: 2 steps in 20 s = 6 steps/min; 97 steps left: 16m10s
    assert out[1] == ("demo: step 3/100  reward -0.500  val 0.150 (step 0)  6.0 steps/min  gen 912 tok/s  "
                      "elapsed 35s  ETA 16m10s")


def test_the_ticker_repeats_the_line_saying_how_long_no_step_came_and_close_shows_the_last_state():
    sink, clock, out = _lines(30.0)
    sink.tick()
    assert out == ["demo: step 0/100  elapsed 0s  ETA ?  (no step logged yet)"]
    clock.t += 29
    sink.tick()
    assert len(out) == 1
    clock.t += 1
    sink.write(_record(1, 5.0))
    clock.t += 45
    sink.tick()
    assert out[-1].startswith("demo: step 1/100") and out[-1].endswith("(no new step for 45s)")
    clock.t += 5
    sink.write(_record(2, 9.0))  # 5 s after the last line: held back ...
    assert len(out) == 3
    sink.close()  # ... and shown when the run ends
    assert len(out) == 4 and out[-1].startswith("demo: step 2/100") and "no new step" not in out[-1]
    sink.close()
    assert len(out) == 4  # nothing new: no second copy


def test_interval_zero_prints_every_record_and_starts_no_thread():
    out = []
    sink = ProgressLines(5, 0, "demo", 0.0, emit=out.append)
    assert sink._thread is None
    for step in range(3):
        sink.write(_record(step, float(step)))
    sink.close()
    assert [line.split("  ")[0] for line in out] == ["demo: step 0/5", "demo: step 1/5", "demo: step 2/5"]


def test_the_ticker_thread_ends_at_close():
    sink = ProgressLines(5, 0, "demo", 3600.0, emit=lambda line: None)
    assert sink._thread.is_alive()
    sink.close()
    assert not sink._thread.is_alive()


def test_the_time_limit_caps_the_eta_and_says_so_and_lines_are_never_cut():
    sink, clock, out = _lines(0.0, total=900)
    sink.set_deadline(clock.t + 90)
    forecast = {"forecast_state": "rising", "forecast_A": 0.52, "forecast_A_lo": 0.4, "forecast_A_hi": 0.61,
                "forecast_identified": False, "forecast_final": 0.45}
    sink.write(_record(1, 1.0))
    sink.write(_record(11, 11.0, **forecast))  # 60 steps/min: 889 steps would take 14m49s
    assert out[-1].endswith("ETA 1m30s (train.max_minutes)  forecast A 0.52? [0.40-0.61] end 0.45")
    assert len(out[-1]) > 80


def test_duration():
    assert [duration(s) for s in (0.4, 59, 61, 3599, 3600, 7500)] == ["0s", "59s", "1m01s", "59m59s", "1h00m", "2h05m"]


def test_a_terminal_gets_rich_s_live_bar_and_a_log_file_plain_lines():
    lines = progress_sink(10, 0, "demo", 30.0, terminal=False)
    assert isinstance(lines, ProgressLines)
    lines.close()
    bar = progress_sink(10, 0, "demo", 30.0, terminal=True)
    assert isinstance(bar, ProgressBar)
    bar.write(_record(1, 1.0, val_pass_rate=0.2))
    bar.close()


def test_several_reward_functions_show_each_one_s_mean_beside_the_reward():
    """TRL shows ``rewards/<NAME>/mean``; the records have ``reward/<NAME>`` (and ``_std``)."""
    sink, clock, out = _lines(30.0)
    parts = {"reward/correctness": 0.0625, "reward/correctness_std": 0.242, "reward/format_reward": 0.5,
             "reward/format_reward_std": 0.0}
    sink.write(_record(0, 0.0, **parts))
    assert out[0].startswith("demo: step 0/100  reward -0.500 (correctness 0.062, format_reward 0.500)  gen ")
    clock.t += 30
    sink.write(_record(1, 1.0, **{"reward/correctness": 1.0, "reward/correctness_std": 0.0}))  # one function
    assert out[1].startswith("demo: step 1/100  reward -0.500  gen ")
