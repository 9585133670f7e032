"""cron / every: syntax, validation, serialisation and Celery's BaseSchedule contract."""

from __future__ import annotations

import json
import math
import pickle
import shelve
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import BaseSchedule, crontab, schedule

from celery_gaffer.exceptions import GafferError, InvalidSchedule
from celery_gaffer.protocol import jitter_delay
from celery_gaffer.schedules import (
    Cron,
    Every,
    as_schedule,
    cron,
    every,
    schedule_from_dict,
)

UTC = timezone.utc
NY = ZoneInfo("America/New_York")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def first_fires(expr: str, start: datetime, count: int, tz: str = "UTC") -> list[datetime]:
    fires = cron(expr, tz).fires_between(start, start + timedelta(days=365 * 100))
    return [next(fires) for _ in range(count)]


# --- cron: results -----------------------------------------------------------------


def test_next_after_is_strictly_after_and_in_utc_to_the_second() -> None:
    daily = cron("30 2 * * *", "America/New_York")
    assert daily.next_after(utc(2026, 1, 10, 7, 29, 59)) == utc(2026, 1, 10, 7, 30)
    assert daily.next_after(utc(2026, 1, 10, 7, 30)) == utc(2026, 1, 11, 7, 30)
    # A microsecond before the fire still gets it; results drop sub-seconds.
    fire = daily.next_after(datetime(2026, 1, 10, 7, 29, 59, 999_999, tzinfo=UTC))
    assert fire == utc(2026, 1, 10, 7, 30)
    assert fire is not None
    assert fire.tzinfo is UTC
    assert fire.microsecond == 0


def test_arguments_may_be_in_any_zone() -> None:
    daily = cron("0 9 * * *", "Europe/Paris")
    in_ny = datetime(2026, 6, 1, 0, 0, tzinfo=NY)  # 04:00Z
    assert daily.next_after(in_ny) == utc(2026, 6, 1, 7, 0)
    assert daily.next_after(in_ny.astimezone(timezone(timedelta(hours=9)))) == utc(2026, 6, 1, 7)


def test_fires_between_excludes_start_includes_end() -> None:
    hourly = cron("0 * * * *")
    fires = list(hourly.fires_between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 3)))
    assert fires == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    assert list(hourly.fires_between(utc(2026, 1, 1, 3), utc(2026, 1, 1, 3))) == []
    assert list(hourly.fires_between(utc(2026, 1, 1, 4), utc(2026, 1, 1, 3))) == []


@pytest.mark.parametrize("method", ["next_after", "fires_between"])
def test_naive_or_non_datetime_arguments_are_refused_naming_them(method: str) -> None:
    schedules = [cron("* * * * *"), every(10)]
    naive = datetime(2026, 1, 1)
    for s in schedules:
        if method == "next_after":
            with pytest.raises(InvalidSchedule, match="t must be a timezone-aware") as info:
                s.next_after(naive)
            assert info.value.field == "t"
            with pytest.raises(InvalidSchedule):
                s.next_after("2026-01-01T00:00:00Z")  # type: ignore[arg-type]
        else:
            with pytest.raises(InvalidSchedule) as info:
                s.fires_between(naive, utc(2026, 1, 2))
            assert info.value.field == "start"
            # Checked at the call, not when the iterator is first advanced.
            with pytest.raises(InvalidSchedule) as info:
                s.fires_between(utc(2026, 1, 1), naive)
            assert info.value.field == "end"


# --- cron: syntax --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("5,10 1 * * *", [utc(2026, 1, 1, 1, 5), utc(2026, 1, 1, 1, 10), utc(2026, 1, 2, 1, 5)]),
        ("0 1-3 * * *", [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]),
        ("*/20 0 * * *", [utc(2026, 1, 1, 0, 20), utc(2026, 1, 1, 0, 40), utc(2026, 1, 2)]),
        ("0 0-10/5 * * *", [utc(2026, 1, 1, 5), utc(2026, 1, 1, 10), utc(2026, 1, 2, 0)]),
        ("0 0 1 feb,MAR *", [utc(2026, 2, 1), utc(2026, 3, 1), utc(2027, 2, 1)]),
        ("0 0 * * mon-wed", [utc(2026, 1, 5), utc(2026, 1, 6), utc(2026, 1, 7)]),
        # 0 and 7 are both Sunday (2026-01-04 is a Sunday).
        ("0 0 * * 0", [utc(2026, 1, 4), utc(2026, 1, 11), utc(2026, 1, 18)]),
        ("0 0 * * 7", [utc(2026, 1, 4), utc(2026, 1, 11), utc(2026, 1, 18)]),
        # Both day fields restricted: either matches (the 13th, or any Friday).
        ("0 0 13 * 5", [utc(2026, 1, 2), utc(2026, 1, 9), utc(2026, 1, 13)]),
        # A day field starting with "*" restricts nothing: both must match.
        ("0 0 */13 * 5", [utc(2026, 2, 27), utc(2026, 3, 27), utc(2026, 5, 1)]),
        # Extensions: last day, last weekday, last Friday, second Monday.
        ("0 0 L * *", [utc(2026, 1, 31), utc(2026, 2, 28), utc(2026, 3, 31)]),
        ("0 0 LW * *", [utc(2026, 1, 30), utc(2026, 2, 27), utc(2026, 3, 31)]),
        ("0 0 * * 5L", [utc(2026, 1, 30), utc(2026, 2, 27), utc(2026, 3, 27)]),
        ("0 0 * * MON#2", [utc(2026, 1, 12), utc(2026, 2, 9), utc(2026, 3, 9)]),
        # A one-value stepped range is that value (cronsim alone reads it as 2-23/5).
        ("0 2-2/5 * * *", [utc(2026, 1, 1, 2), utc(2026, 1, 2, 2), utc(2026, 1, 3, 2)]),
        ("0 0 * * sun-SUN/3", [utc(2026, 1, 4), utc(2026, 1, 11), utc(2026, 1, 18)]),
        # "a/step" is "a-max/step", as in cronie and cronsim.
        ("0 20/2 * * *", [utc(2026, 1, 1, 20), utc(2026, 1, 1, 22), utc(2026, 1, 2, 20)]),
        ("  0   0  1  1  *  ", [utc(2027, 1, 1), utc(2028, 1, 1), utc(2029, 1, 1)]),
    ],
)
def test_field_syntax(expr: str, expected: list[datetime]) -> None:
    assert first_fires(expr, utc(2026, 1, 1), len(expected)) == expected


@pytest.mark.parametrize(
    ("macro", "expansion", "fixed_time"),
    [
        ("@yearly", "0 0 1 1 *", True),
        ("@annually", "0 0 1 1 *", True),
        ("@monthly", "0 0 1 * *", True),
        ("@weekly", "0 0 * * 0", True),
        ("@daily", "0 0 * * *", True),
        ("@midnight", "0 0 * * *", True),
        ("@hourly", "0 * * * *", False),
        ("@DAILY", "0 0 * * *", True),
    ],
)
def test_macros_behave_as_their_expansion(macro: str, expansion: str, fixed_time: bool) -> None:
    start = utc(2026, 3, 1)
    zone = "America/New_York"
    assert first_fires(macro, start, 5, zone) == first_fires(expansion, start, 5, zone)
    assert cron(macro).is_fixed_time is fixed_time
    assert cron(macro).expr == macro


@pytest.mark.parametrize(
    ("expr", "fixed_time"),
    [
        ("30 2 * * *", True),
        ("0 0-23 * * *", True),
        ("0,30 1,2 * * *", True),
        ("0 * * * *", False),
        ("*/15 2 * * *", False),
        ("30 */2 * * *", False),
        ("* 2 * * *", False),
    ],
)
def test_fixed_time_unless_minute_or_hour_starts_with_a_star(expr: str, fixed_time: bool) -> None:
    assert cron(expr).is_fixed_time is fixed_time


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "* * * *",
        "0 0 0 * * *",  # seconds field: cronsim takes it, the contract does not
        "* * * * * * *",
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "5-1 * * * *",
        "0 0 30 2 *",  # no February 30th
        "@reboot",
        "@every 5m",
        "0 0 * * MON-SUN",
        "0 0 ? * *",
        "0 0 * * \u017fun",  # upper-cases to SUN
        "0 0 * * ５",  # noqa: RUF001 - a full-width digit
    ],
)
def test_bad_expressions_are_refused_naming_expr(expr: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        cron(expr)
    assert info.value.field == "expr"
    assert repr(expr.strip())[1:-1] in str(info.value) or "expr" in str(info.value)
    assert isinstance(info.value, GafferError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("expr", "part"),
    [("0 9 15W * *", "15W"), ("0 9 1,15w * *", "15w"), ("0 9 W * *", "W")],
)
def test_the_nearest_weekday_is_refused_by_name(expr: str, part: str) -> None:
    # LW (the last weekday of the month) is accepted: see test_field_syntax.
    with pytest.raises(InvalidSchedule) as info:
        cron(expr)
    assert info.value.field == "expr"
    assert str(info.value) == (
        f"expr {expr!r}: {part!r} (the weekday nearest a day) is not supported; "
        "'LW' (the last weekday of the month) is"
    )


def test_crons_docstring_quotes_the_nearest_weekday_refusal() -> None:
    with pytest.raises(InvalidSchedule) as info:
        cron("0 9 15W * *")
    docstring = " ".join((cron.__doc__ or "").replace("``", "").split())
    assert str(info.value) in docstring


def test_non_string_expression_is_refused() -> None:
    with pytest.raises(InvalidSchedule) as info:
        cron(5)  # type: ignore[arg-type]
    assert info.value.field == "expr"


@pytest.mark.parametrize(
    "tz", ["Mars/Olympus", "", "America", "../../etc/passwd", "/etc/localtime", "utc "]
)
def test_unknown_zone_is_refused_naming_tz(tz: str) -> None:
    with pytest.raises(InvalidSchedule, match="tz") as info:
        cron("0 0 * * *", tz)
    assert info.value.field == "tz"


def test_non_string_zone_is_refused() -> None:
    with pytest.raises(InvalidSchedule) as info:
        cron("0 0 * * *", ZoneInfo("UTC"))  # type: ignore[arg-type]
    assert info.value.field == "tz"


def test_far_future_returns_none_instead_of_crashing() -> None:
    assert cron("0 0 * * *").next_after(datetime.max.replace(tzinfo=UTC)) is None
    assert cron("0 0 * * *", "Pacific/Kiritimati").next_after(utc(9999, 12, 31, 10)) is None
    assert cron("0 0 * * *", "America/New_York").next_after(utc(9999, 12, 31)) is not None
    # The next 29th of February would be in year 10000.
    assert cron("0 0 29 2 *").next_after(utc(9997, 1, 1)) is None
    assert list(cron("0 0 1 1 *").fires_between(utc(9998, 6, 1), datetime.max.replace(tzinfo=UTC)))
    assert every(60).next_after(datetime.max.replace(tzinfo=UTC)) is None


def test_cron_properties() -> None:
    s = cron("30  2 * * *", "America/New_York", jitter=timedelta(seconds=90))
    assert (s.expr, s.tz, s.jitter, s.is_fixed_time) == ("30 2 * * *", "America/New_York", 90, True)
    assert repr(s) == "cron('30 2 * * *', tz='America/New_York', jitter=90.0)"
    assert repr(cron("@daily")) == "cron('@daily', tz='UTC')"


# --- every -------------------------------------------------------------------------


def test_every_fires_on_the_epoch_grid_by_default() -> None:
    minute = every(60)
    assert minute.next_after(utc(2026, 1, 1, 0, 0, 30)) == utc(2026, 1, 1, 0, 1)
    assert minute.next_after(utc(2026, 1, 1, 0, 1)) == utc(2026, 1, 1, 0, 2)
    fires = list(every(timedelta(hours=1)).fires_between(utc(2026, 1, 1), utc(2026, 1, 1, 3)))
    assert fires == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    assert minute.anchor == datetime(1970, 1, 1, tzinfo=UTC)


def test_every_is_elapsed_time_across_dst() -> None:
    # Ten-hourly in New York is still ten hours apart across the fall-back night.
    s = every(36000, anchor=datetime(2026, 10, 31, 20, 0, tzinfo=NY))
    fires = list(s.fires_between(utc(2026, 11, 1), utc(2026, 11, 2)))
    assert all(b - a == timedelta(hours=10) for a, b in pairwise(fires))
    assert fires[0] == utc(2026, 11, 1, 10)


def test_every_anchor_sets_the_phase_and_is_truncated_to_the_second() -> None:
    s = every(90, anchor=datetime(2026, 5, 1, 12, 0, 7, 250_000, tzinfo=UTC))
    assert s.anchor == utc(2026, 5, 1, 12, 0, 7)
    assert s.next_after(utc(2026, 5, 1, 12, 0, 7)) == utc(2026, 5, 1, 12, 1, 37)
    # Fires before the anchor exist too: it only fixes the phase.
    assert s.next_after(utc(2026, 5, 1, 11, 58)) == utc(2026, 5, 1, 11, 58, 37)


@pytest.mark.parametrize(
    "interval",
    [0, -1, 1.5, 0.5, math.nan, math.inf, True, "60", None, timedelta(milliseconds=1500)],
)
def test_bad_intervals_are_refused_naming_interval(interval: object) -> None:
    with pytest.raises(InvalidSchedule, match="interval") as info:
        every(interval)  # type: ignore[arg-type]
    assert info.value.field == "interval"


def test_whole_float_and_timedelta_intervals_are_accepted() -> None:
    assert every(60.0).interval == 60
    assert every(timedelta(minutes=2)).interval == 120


def test_naive_anchor_is_refused() -> None:
    with pytest.raises(InvalidSchedule) as info:
        every(60, anchor=datetime(2026, 1, 1))
    assert info.value.field == "anchor"


@pytest.mark.parametrize("jitter", [-1, -0.001, math.nan, math.inf, "5", True])
def test_bad_jitter_is_refused(jitter: object) -> None:
    for build in (lambda: cron("0 0 * * *", jitter=jitter), lambda: every(60, jitter=jitter)):  # type: ignore[arg-type]
        with pytest.raises(InvalidSchedule, match="jitter") as info:
            build()
        assert info.value.field == "jitter"


@pytest.mark.parametrize("jitter", [60, 61, timedelta(minutes=1)])
def test_every_jitter_must_be_smaller_than_the_interval(jitter: float | timedelta) -> None:
    with pytest.raises(InvalidSchedule, match="smaller than the interval") as info:
        every(60, jitter=jitter)
    assert info.value.field == "jitter"
    assert every(60, jitter=59.5).jitter == 59.5


def test_every_repr() -> None:
    assert repr(every(60)) == "every(60)"
    anchored = every(5, anchor=utc(2026, 1, 1), jitter=2)
    assert repr(anchored) == "every(5, anchor='2026-01-01T00:00:00+00:00', jitter=2.0)"


# --- jitter: send_at ---------------------------------------------------------------


def test_send_at_adds_the_keys_jitter_delay() -> None:
    s = cron("0 * * * *", jitter=600)
    nominal = utc(2026, 1, 1, 5)
    key = "report@2026-01-01T05:00:00Z"
    sent = s.send_at(key, nominal)
    assert sent == nominal + timedelta(seconds=jitter_delay(key, 600))
    assert nominal <= sent < nominal + timedelta(seconds=600)
    assert s.send_at(key, nominal.astimezone(NY)) == sent
    assert cron("0 * * * *").send_at(key, nominal) == nominal


def test_send_at_never_reaches_the_next_fire() -> None:
    # A jitter as long as the shortest gap is refused, like every()'s...
    with pytest.raises(InvalidSchedule, match="shortest gap"):
        cron("* * * * *", jitter=60)
    # ...and one just below it keeps each send inside its minute.
    s = cron("* * * * *", jitter=59.9)
    nominal = utc(2026, 1, 1, 5)
    sends = [s.send_at(f"job-{i}@x", nominal) for i in range(200)]
    assert all(nominal <= sent < nominal + timedelta(minutes=1) for sent in sends)
    with pytest.raises(InvalidSchedule):
        s.send_at("k", datetime(2026, 1, 1))


# --- serialisation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "original",
    [
        cron("30 2 * * *", "America/New_York"),
        cron("@hourly", jitter=12.5),
        every(60),
        every(3600, anchor=datetime(2026, 3, 8, 1, 0, tzinfo=NY), jitter=30),
    ],
)
def test_to_dict_round_trips_through_json(original: Cron | Every) -> None:
    data = json.loads(json.dumps(original.to_dict()))
    restored = schedule_from_dict(data)
    assert restored == original
    assert hash(restored) == hash(original)
    assert restored.to_dict() == original.to_dict()
    start = utc(2026, 3, 1)
    assert list(restored.fires_between(start, start + timedelta(days=3))) == list(
        original.fires_between(start, start + timedelta(days=3))
    )


def test_to_dict_shapes() -> None:
    assert cron("30 2 * * *", "America/New_York").to_dict() == {
        "kind": "cron",
        "expr": "30 2 * * *",
        "tz": "America/New_York",
        "jitter": 0.0,
    }
    assert every(60).to_dict() == {
        "kind": "every",
        "interval": 60,
        "anchor": "1970-01-01T00:00:00+00:00",
        "jitter": 0.0,
    }


def test_from_dict_defaults_and_z_suffix() -> None:
    assert schedule_from_dict({"kind": "cron", "expr": "0 0 * * *"}) == cron("0 0 * * *")
    anchored = schedule_from_dict({"kind": "every", "interval": 5, "anchor": "2026-01-01T00:00Z"})
    assert anchored == every(5, anchor=utc(2026, 1, 1))


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "schedule"),
        ({}, "kind"),
        ({"kind": "crontab", "expr": "* * * * *"}, "kind"),
        ({"kind": ["cron"], "expr": "* * * * *"}, "kind"),
        ({"kind": "cron"}, "expr"),
        ({"kind": "cron", "expr": "* * *"}, "expr"),
        ({"kind": "cron", "expr": "* * * * *", "tz": "Nowhere/Land"}, "tz"),
        ({"kind": "cron", "expr": "* * * * *", "jitter": "1"}, "jitter"),
        ({"kind": "cron", "expr": "* * * * *", "interval": 5}, "interval"),
        ({"kind": "every"}, "interval"),
        ({"kind": "every", "interval": 0.5}, "interval"),
        ({"kind": "every", "interval": 5, "anchor": "yesterday"}, "anchor"),
        ({"kind": "every", "interval": 5, "anchor": 0}, "anchor"),
        ({"kind": "every", "interval": 5, "anchor": "2026-01-01T00:00:00"}, "anchor"),
        ({"kind": "every", "interval": 5, "jitter": 5}, "jitter"),
        ({"kind": "every", "interval": 5, "expr": "* * * * *"}, "expr"),
    ],
)
def test_bad_dicts_are_refused_naming_the_field(data: object, field: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        schedule_from_dict(data)  # type: ignore[arg-type]
    assert info.value.field == field


def test_as_schedule() -> None:
    c = cron("0 0 * * *")
    assert as_schedule(c) is c
    assert as_schedule(30) == every(30)
    assert as_schedule(30.0) == every(30)
    assert as_schedule(timedelta(minutes=1)) == every(60)
    with pytest.raises(InvalidSchedule, match="interval"):
        as_schedule(0.5)


def test_as_schedule_refuses_celery_crontab_with_advice() -> None:
    with pytest.raises(InvalidSchedule) as info:
        as_schedule(crontab(minute="30", hour="2"))
    message = str(info.value)
    assert "use celery_gaffer.cron(...) instead" in message
    assert "different DST behaviour" in message
    assert info.value.field == "schedule"


@pytest.mark.parametrize("value", ["*/5 * * * *", None, True, {"kind": "cron"}, schedule(60)])
def test_as_schedule_refuses_anything_else(value: object) -> None:
    with pytest.raises(InvalidSchedule, match="schedule must be") as info:
        as_schedule(value)
    assert info.value.field == "schedule"


def test_equality_and_hash() -> None:
    assert cron("0 0 * * *", "UTC") == cron("0  0 * * *")
    assert cron("0 0 * * *") != cron("0 0 * * *", "Europe/London")
    assert cron("0 0 * * *") != cron("0 0 * * *", jitter=1)
    assert every(60) == every(timedelta(seconds=60))
    assert every(60) != every(60, anchor=utc(2026, 1, 1, 0, 0, 1))
    assert cron("0 * * * *") != every(3600)
    assert len({cron("@daily"), cron("@daily"), every(5), every(5.0)}) == 2


# --- Celery's contract -------------------------------------------------------------


@pytest.fixture
def plain_app() -> Celery:
    return Celery("gaffer-schedule-tests", set_as_current=False)


class Clock:
    """An injectable ``nowfun``."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_both_are_celery_base_schedules() -> None:
    assert isinstance(cron("* * * * *"), BaseSchedule)
    assert isinstance(every(1), BaseSchedule)


def test_cron_is_due_contract_with_an_injected_clock(plain_app: Celery) -> None:
    clock = Clock(utc(2026, 3, 8, 6, 59, 30))
    s = Cron("30 2 * * *", "America/New_York", nowfun=clock, app=plain_app)
    last_run = utc(2026, 3, 7, 7, 30)  # the previous fire
    # Before the fire (which the gap moved to 07:00Z): not due, check again at it.
    assert s.is_due(last_run) == (False, 30.0)
    assert s.remaining_estimate(last_run) == timedelta(seconds=30)
    # At the fire: due, and the next check is at the following fire (06:30Z next day).
    clock.now = utc(2026, 3, 8, 7, 0)
    assert s.is_due(last_run) == (True, 23.5 * 3600)
    # Late (Beat was down): still due, once; next is measured from now.
    clock.now = utc(2026, 3, 8, 9, 0, 0, 500_000)
    due, next_seconds = s.is_due(last_run)
    assert due is True
    assert next_seconds == pytest.approx(21.5 * 3600 - 0.5)
    assert s.remaining_estimate(last_run) < timedelta(0)


def test_every_is_due_contract_with_an_injected_clock(plain_app: Celery) -> None:
    clock = Clock(utc(2026, 1, 1, 0, 0, 0, 400_000))
    s = Every(1, nowfun=clock, app=plain_app)
    last_run = utc(2026, 1, 1, 0, 0, 0, 100_000)
    assert s.is_due(last_run) == (False, pytest.approx(0.6))
    clock.now = utc(2026, 1, 1, 0, 0, 1, 50_000)
    assert s.is_due(last_run) == (True, pytest.approx(0.95))
    assert s.is_due(clock.now) == (False, pytest.approx(0.95))


def test_naive_last_run_at_is_read_as_celery_reads_it(plain_app: Celery) -> None:
    clock = Clock(utc(2026, 1, 1, 12, 0, 30))
    s = Every(60, nowfun=clock, app=plain_app)
    # Celery's maybe_make_aware: a naive datetime is UTC.
    assert s.is_due(datetime(2026, 1, 1, 11, 59, 59)) == (True, 30.0)
    assert s.is_due(datetime(2026, 1, 1, 12, 0, 0)) == (False, 30.0)
    naive_clock = Clock(datetime(2026, 1, 1, 12, 0, 30))
    s = Every(60, nowfun=naive_clock, app=plain_app)
    assert s.is_due(datetime(2026, 1, 1, 12, 0, 0)) == (False, 30.0)


def test_default_clock_is_the_apps(plain_app: Celery) -> None:
    s = Every(3600, app=plain_app)
    due, next_seconds = s.is_due(datetime.now(UTC))
    assert due is False
    assert 0 < next_seconds <= 3600


def test_pickles_for_celerys_persistent_scheduler(tmp_path: Path, plain_app: Celery) -> None:
    entry = ScheduleEntry(
        name="nightly",
        task="proj.nightly",
        schedule=cron("30 2 * * *", "America/New_York", jitter=5),
        app=plain_app,
    )
    with shelve.open(str(tmp_path / "beat")) as db:
        db["entries"] = {"nightly": entry}
    with shelve.open(str(tmp_path / "beat")) as db:
        restored = db["entries"]["nightly"]
    assert restored.schedule == entry.schedule
    assert restored.schedule.next_after(utc(2026, 3, 8)) == utc(2026, 3, 8, 7)
    for s in (cron("@hourly"), every(7, anchor=utc(2026, 1, 1), jitter=3)):
        assert pickle.loads(pickle.dumps(s)) == s


def test_a_beat_schedule_entry_accepts_them(plain_app: Celery) -> None:
    clock = Clock(utc(2026, 1, 1, 0, 0, 5))
    s = Every(10, nowfun=clock)
    entry = ScheduleEntry(name="tick", task="t", schedule=s, app=plain_app)
    assert entry.schedule is s
    assert entry.last_run_at == clock.now
    assert entry.is_due() == (False, 5.0)
    clock.now = utc(2026, 1, 1, 0, 0, 10)
    assert entry.is_due() == (True, 10.0)


@pytest.mark.parametrize(
    "template",
    ["{invoice.id}", "{items[0]}", "{0}", "{n:>100000000}", "{n:{width}}", "{", ""],
)
def test_key_templates_run_no_code_of_their_arguments_and_have_bounded_width(
    template: str,
) -> None:
    from celery_gaffer.exceptions import InvalidInput
    from celery_gaffer.schedules.spec import check_key_template

    with pytest.raises(InvalidInput) as info:
        check_key_template(template)
    assert info.value.field == "gaffer_key"


def test_plain_key_templates_are_accepted() -> None:
    from celery_gaffer.schedules.spec import check_key_template

    for template in ("invoice.settled:{invoice_id}", "r:{invoice_id}:{day}", "{n:>8}", "{{x}}"):
        assert check_key_template(template) == template
