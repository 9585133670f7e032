"""The fast path on real PostgreSQL: arrays sent in psycopg's binary format arrive
unchanged, and returned values get SQLAlchemy's conversion (aware UTC datetimes, floats)
without its result objects."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select, text

from celery_gaffer.store import fastpath
from celery_gaffer.store.arrays import array_param
from celery_gaffer.store.fastpath import _plan_for

from .test_retention import migrated

TEXTS = [
    "plain", 'a "quoted" word', "back\\slash", "{braces}", "a,comma", "NULL", "", None,
    "ünïcødé ✓", "tab\tand\nnewline", "  spaces  ",
]  # fmt: skip
BERLIN = ZoneInfo("Europe/Berlin")
TIMES = [
    datetime(2026, 3, 29, 0, 59, 59, 123456, tzinfo=timezone.utc),
    datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN),
    None,
    datetime(1970, 1, 1, tzinfo=timezone(timedelta(hours=-5))),
]
BIGINTS = [2**40, -1, 0, None, 2**63 - 1]
FLOATING = [0.1, -2.5e300, None, float("inf")]

STRINGS = select(func.unnest(array_param("values", "str")))
DATETIMES = select(func.unnest(array_param("values", "datetime")))
BIGS = select(func.unnest(array_param("values", "bigint")))
FLOATS = select(func.unnest(array_param("values", "float")))


@pytest.fixture
def database(postgres_url: str) -> Iterator[Any]:
    with migrated(postgres_url) as database:
        yield database


@pytest.mark.parametrize(
    ("statement", "values"),
    [(STRINGS, TEXTS), (DATETIMES, TIMES), (BIGS, BIGINTS), (FLOATS, FLOATING)],
)
def test_arrays_go_in_binary_and_arrive_unchanged(
    database: Any, statement: Any, values: list[Any]
) -> None:
    with database.begin() as conn:
        plan = _plan_for(conn, statement, reading=True)
        assert plan is not None
        assert "%(values)b" in plan.sql
        got = [row[0] for row in fastpath.execute(conn, statement, {"values": values}).all()]
    assert got == values


def test_returned_datetimes_and_floats_are_converted_as_sqlalchemy_converts_them(
    database: Any,
) -> None:
    schedules = database.models.Schedule.__table__
    statement = select(schedules.c.watermark_at, schedules.c.grace, schedules.c.name)
    at = datetime(2026, 10, 25, 1, 30, tzinfo=timezone.utc)
    with database.begin() as conn:
        conn.execute(
            schedules.insert().values(
                name="fast", task="t.noop", schedule={}, args=[], kwargs={},
                options={}, catchup="latest", overlap="allow", watermark_at=at, grace=2.5,
                created_at=at, updated_at=at,
            )
        )  # fmt: skip
        # The session's zone would show in the value if it were returned unconverted.
        conn.execute(text("SET LOCAL TIME ZONE 'America/New_York'"))
        assert _plan_for(conn, statement, reading=True) is not None  # the fast path
        fast = fastpath.execute(conn, statement, {}).one()
        slow = conn.execute(statement).one()
    assert fast == tuple(slow) == (at, 2.5, "fast")
    assert fast[0].tzinfo is timezone.utc
