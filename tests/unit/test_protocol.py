"""Fire keys, task ids and jitter delays: the values every Beat must agree on."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from uuid import NAMESPACE_URL, UUID, uuid5
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_gaffer.exceptions import InvalidSchedule
from celery_gaffer.protocol import (
    NOMINAL_FORMAT,
    fire_key,
    fire_task_id,
    format_nominal,
    jitter_delay,
)

UTC = timezone.utc
ROOT = Path(__file__).resolve().parents[2]
PINNED_DELAY = 290.84325595142434


def test_fire_key_is_the_schedule_and_the_utc_nominal_time() -> None:
    nominal = datetime(2026, 3, 8, 3, 0, tzinfo=ZoneInfo("America/New_York"))
    assert fire_key("nightly", nominal) == "nightly@2026-03-08T07:00:00Z"
    assert fire_key("nightly", nominal.astimezone(UTC)) == "nightly@2026-03-08T07:00:00Z"
    assert fire_key("a@b", datetime(1970, 1, 1, tzinfo=UTC)) == "a@b@1970-01-01T00:00:00Z"


def test_fire_key_keeps_both_occurrences_of_a_repeated_hour_apart() -> None:
    ny = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 0, tzinfo=ny, fold=0)
    second = datetime(2026, 11, 1, 1, 0, tzinfo=ny, fold=1)
    assert fire_key("h", first) == "h@2026-11-01T05:00:00Z"
    assert fire_key("h", second) == "h@2026-11-01T06:00:00Z"


def test_fire_key_refuses_a_naive_time() -> None:
    with pytest.raises(InvalidSchedule) as info:
        fire_key("nightly", datetime(2026, 1, 1))
    assert info.value.field == "nominal_at"


def test_fire_task_id_is_uuid5_of_the_key() -> None:
    key = "nightly@2026-03-08T07:00:00Z"
    task_id = fire_task_id(key)
    assert task_id == str(uuid5(NAMESPACE_URL, "gaffer:" + key))
    assert UUID(task_id).version == 5
    assert fire_task_id(key) == task_id
    assert fire_task_id("nightly@2026-03-09T07:00:00Z") != task_id


@given(st.text())
def test_fire_task_id_is_uuid5_of_any_key(key: str) -> None:
    # Computed without uuid5 (the hot path): the same string for every key.
    assert fire_task_id(key) == str(uuid5(NAMESPACE_URL, "gaffer:" + key))


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, ZoneInfo("America/New_York"), ZoneInfo("Asia/Kolkata")]),
        allow_imaginary=False,
    )
)
def test_format_nominal_is_the_utc_second_of_any_time(nominal: datetime) -> None:
    expected = nominal.astimezone(UTC).strftime(NOMINAL_FORMAT)
    # Twice: the second call may come from the cache of formatted UTC times.
    assert format_nominal(nominal) == expected
    assert format_nominal(nominal.astimezone(UTC)) == expected
    assert format_nominal(nominal.astimezone(UTC)) == expected


def test_format_nominal_keeps_a_repeated_hour_apart_after_formatting_it_once() -> None:
    ny = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=ny, fold=0)
    second = datetime(2026, 11, 1, 1, 30, tzinfo=ny, fold=1)
    assert first == second
    assert hash(first) == hash(second)
    assert format_nominal(first) == "2026-11-01T05:30:00Z"
    assert format_nominal(second) == "2026-11-01T06:30:00Z"
    assert format_nominal(first.astimezone(UTC)) == "2026-11-01T05:30:00Z"
    assert format_nominal(second.astimezone(UTC)) == "2026-11-01T06:30:00Z"


def test_jitter_delay_is_in_range_and_spread_evenly() -> None:
    jitter = 30.0
    delays = [
        jitter_delay(f"job@2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", jitter) for i in range(3000)
    ]
    assert all(0.0 <= d < jitter for d in delays)
    # Ten equal buckets each get roughly a tenth (a broken hash piles keys up).
    buckets = [0] * 10
    for d in delays:
        buckets[int(d / jitter * 10)] += 1
    assert all(200 <= count <= 400 for count in buckets), buckets
    assert len(set(delays)) == len(delays)


def test_jitter_delay_is_deterministic_and_scales_with_the_jitter() -> None:
    key = "nightly@2026-03-08T07:00:00Z"
    assert jitter_delay(key, 60) == jitter_delay(key, 60.0)
    assert jitter_delay(key, 120) == pytest.approx(2 * jitter_delay(key, 60))
    assert jitter_delay(key, 0) == 0.0
    assert jitter_delay(key, timedelta(seconds=60).total_seconds()) == jitter_delay(key, 60)


def test_jitter_delay_follows_the_documented_derivation() -> None:
    # blake2b(key, 8 bytes, person "gaffer-jitter"), top 53 bits as a fraction of 2**53.
    key = "nightly@2026-03-08T07:00:00Z"
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"gaffer-jitter").digest()
    fraction = (int.from_bytes(digest, "big") >> 11) / 2**53
    assert jitter_delay(key, 600) == fraction * 600


def test_jitter_delay_is_pinned() -> None:
    # A Beat of the next release must delay a fire exactly as this one does: changing
    # the derivation would make Beats of two versions disagree. Update only on purpose.
    assert jitter_delay("nightly@2026-03-08T07:00:00Z", 600) == PINNED_DELAY


def test_jitter_delay_is_the_same_in_other_processes() -> None:
    keys = [f"tenant-{i}@2026-01-01T00:00:00Z" for i in range(50)]
    here = [jitter_delay(k, 300) for k in keys]
    code = (
        "import json, sys; from celery_gaffer.protocol import jitter_delay; "
        "print(json.dumps([jitter_delay(k, 300) for k in json.loads(sys.argv[1])]))"
    )
    for seed in ("0", "1", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", code, json.dumps(keys)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=ROOT,
        )
        assert json.loads(result.stdout) == here


@pytest.mark.parametrize("jitter", [1e-300, 5e-324, 1e300, 3.0, 7.0])
def test_jitter_delay_stays_below_extreme_jitters(jitter: float) -> None:
    for i in range(200):
        assert 0.0 <= jitter_delay(f"k{i}", jitter) < jitter


@pytest.mark.parametrize("jitter", [-1.0, math.nan, math.inf])
def test_jitter_delay_refuses_bad_jitter(jitter: float) -> None:
    with pytest.raises(InvalidSchedule) as info:
        jitter_delay("k", jitter)
    assert info.value.field == "jitter"
