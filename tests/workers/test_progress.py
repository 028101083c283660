"""The rules of a study's progress (``workers.progress``): the shown state against the counts,
throughput and ETA measured on finish times, and the best arm."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from normfree.workers import progress

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def counts(**kw: int) -> dict[str, int]:
    return {k.upper(): v for k, v in kw.items()}


@pytest.mark.parametrize(
    ("status", "c", "state"),
    [
        # the bug of issue 27: "running" beside "14/14 finished" must read as its outcome
        ("running", counts(complete=14), "complete"),
        ("pending", counts(complete=3, failed=1), "complete"),
        ("running", counts(failed=2, diverged=1), "failed"),
        ("running", counts(pruned=2, cancelled=1), "failed"),
        ("running", counts(complete=13, running=1), "running"),
        ("running", counts(complete=13, waiting=1), "running"),
        ("pending", counts(waiting=4), "pending"),
        ("pending", counts(running=1, waiting=3), "running"),
        ("pending", {}, "pending"),  # nothing planned yet
        ("paused", counts(complete=2, waiting=2), "paused"),
        ("cancelled", counts(complete=2, running=1), "cancelled"),  # stopping, as stored
        ("complete", counts(complete=14), "complete"),
        ("failed", counts(failed=3), "failed"),
    ],
)
def test_state_never_disagrees_with_the_counts(status: str, c: dict[str, int], state: str) -> None:
    p = progress.summarize(1, status, c)
    assert p.state == state
    left = p.counts["WAITING"] + p.counts["RUNNING"]
    if p.total and not left:  # everything finished: never shown as still to run
        assert p.state not in ("pending", "running")


def test_throughput_and_eta_come_from_finish_times() -> None:
    # 6 trials finished one every 10 s, the first started at T0: 6 trials in 60 s
    finishes = [T0 + timedelta(seconds=10 * i) for i in range(1, 7)]
    p = progress.summarize(
        1, "running", counts(complete=6, waiting=4, running=2), finishes=finishes, first_start=T0
    )
    assert p.throughput_per_min == pytest.approx(6.0)
    assert p.window_trials == 6
    assert p.last_finished_at == finishes[-1]
    assert p.eta_s == pytest.approx(60.0)  # 6 left at 6 per minute
    assert p.eta_at == finishes[-1] + timedelta(seconds=60)


def test_throughput_looks_at_the_last_ten_minutes_only() -> None:
    # a slow first hour (1 trial) then 20 trials in the last 5 minutes
    early = [T0 + timedelta(minutes=5)]
    recent = [T0 + timedelta(minutes=60, seconds=15 * i) for i in range(1, 21)]
    rate, n, span = progress.throughput(early + recent, T0, 21)
    assert n == 20 and span == pytest.approx(600.0)
    assert rate == pytest.approx(2.0)


def test_no_rate_or_eta_before_a_finish_nor_after_the_end() -> None:
    assert progress.summarize(1, "running", counts(waiting=3, running=1)).eta_at is None
    finishes = [T0 + timedelta(seconds=5)]
    done = progress.summarize(1, "complete", counts(complete=1), finishes=finishes, first_start=T0)
    assert done.throughput_per_min == pytest.approx(12.0)
    assert done.eta_at is None and done.eta_s is None


def trial(candidate: str, seed: int, value: float | None, status: str = "COMPLETE", **ax: object):
    return {
        "candidate": candidate,
        "status": status,
        "value": value,
        "objective": "val_acc",
        "axis_values": {"function": candidate, "seed": seed, **ax},
    }


def test_best_arm_merges_seeds_and_spellings() -> None:
    rows = [
        trial("erf", 0, 0.80, shift_h=0.0),
        trial("shift_h(erf, 0)", 1, 0.82, shift_h=0.0),  # the same arm under another name
        trial("tanh", 0, 0.90, shift_h=1.0),
        trial("tanh", 1, 0.60, shift_h=1.0),
        trial("tanh", 2, None, status="DIVERGED", shift_h=1.0),
        trial("erf", 2, 0.99, status="RUNNING", shift_h=0.0),  # not finished: not counted
    ]
    best = progress.best_arm(rows, "shift_h")
    assert best is not None
    assert (best.function, best.n, best.label) == ("erf", 2, "erf @ 0.0")
    assert best.mean == pytest.approx(0.81)
    low = progress.best_arm(rows, "shift_h", "minimize")
    assert low is not None and low.label == "tanh @ 1.0"
    assert progress.best_arm([trial("erf", 0, None, status="FAILED")], None) is None


def test_as_dict_is_json_ready() -> None:
    import json

    finishes = [T0 + timedelta(seconds=30)]
    p = progress.summarize(1, "running", counts(complete=1, waiting=1), finishes=finishes,
                           first_start=T0)  # fmt: skip
    out = json.loads(json.dumps(p.as_dict()))
    assert out["state"] == "running" and out["eta_at"].startswith("2026-01-01T12:01:00")
