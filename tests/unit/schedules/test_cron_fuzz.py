"""Fuzz: any text into cron(), any dict into schedule_from_dict(): InvalidSchedule or a
working schedule, never another exception."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_gaffer.exceptions import InvalidSchedule
from celery_gaffer.schedules import Cron, Every, cron, schedule_from_dict

UTC = timezone.utc
FRAGMENTS = st.sampled_from(
    [
        "*", "/", "-", ",", "#", "L", "W", "LW", "?", "@", "0", "1", "2", "5", "7", "8", "12",
        "13", "23", "24", "29", "30", "31", "32", "59", "60", "00", "99999999999999999999",
        "MON", "sun", "Fri", "JAN", "dec", "Feb", "@daily", "@hourly", "@reboot", "*/", "/0",
        "-1", "5L", "#5", "#6", "L-", "\t", "\n", "\u00a0", "\u2007", "\u0662", "\uff15",
        "\u017fun", "\x00",
    ]
)  # fmt: skip
FIELD = st.lists(FRAGMENTS, min_size=1, max_size=5).map("".join)
FIELD_LIKE = st.lists(FIELD, min_size=1, max_size=7).map(" ".join)
ZONES = st.one_of(
    st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia"]),
    st.text(max_size=30),
)
MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


def exercise(schedule: Cron | Every, moment: datetime) -> None:
    fire = schedule.next_after(moment)
    assert fire is None or (fire > moment and fire.tzinfo is UTC and fire.microsecond == 0)
    try:
        end = moment + timedelta(days=2)
    except OverflowError:
        return
    fires = list(schedule.fires_between(moment, end))
    assert fires == sorted(set(fires))
    assert all(moment < f <= end for f in fires)
    if fires:
        assert fires[0] == fire


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=st.one_of(st.text(), FIELD_LIKE), tz=ZONES, moment=MOMENTS)
def test_cron_takes_any_text(expr: str, tz: str, moment: datetime) -> None:
    try:
        schedule = cron(expr, tz)
    except InvalidSchedule as error:
        refused = error
    else:
        exercise(schedule, moment)
        return
    assert refused.field in {"expr", "tz"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children),
    max_leaves=5,
)
SCHEDULE_DICTS = st.fixed_dictionaries(
    {"kind": st.sampled_from(["cron", "every", "other"])},
    optional={
        "expr": st.one_of(FIELD_LIKE, JSON),
        "tz": st.one_of(ZONES, JSON),
        "interval": st.one_of(st.integers(-5, 10**6), st.floats(), JSON),
        "anchor": st.one_of(
            st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5))])).map(
                datetime.isoformat
            ),
            JSON,
        ),
        "jitter": st.one_of(st.floats(), st.integers(), JSON),
        "extra": JSON,
    },
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(SCHEDULE_DICTS, JSON), moment=MOMENTS)
def test_schedule_from_dict_takes_any_json(data: object, moment: datetime) -> None:
    try:
        schedule = schedule_from_dict(data)  # type: ignore[arg-type]
    except InvalidSchedule as error:
        refused = error
    else:
        assert schedule_from_dict(schedule.to_dict()) == schedule
        exercise(schedule, moment)
        return
    assert refused.field
