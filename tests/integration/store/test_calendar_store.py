"""Stored calendars and the ledger's calendar states in the database: migration 0007's
downgrade, a date added twice at once. Real SQLite / PostgreSQL."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, insert, select

from celery_gaffer.protocol import FireKind, FireState
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import calendars as stored
from celery_gaffer.store import get_engine, migrate, models_for
from celery_gaffer.store.fires import NewFire, insert_fires
from celery_gaffer.store.models import table_of

UTC = timezone.utc


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    return str(request.getfixturevalue("empty_postgres_url"))


def test_downgrading_0007_drops_the_skipped_fires_0006_would_count_as_fires(
    empty_url: str,
) -> None:
    engine = get_engine(parse_database_url(empty_url))
    models = models_for("gaffer_")
    migrate(engine, "gaffer_")
    now = datetime.now(UTC).replace(microsecond=0)
    fires = [
        NewFire("s", now - timedelta(days=n), FireKind.SCHEDULED, state, now, 1, reason=reason)
        for n, state, reason in [
            (1, FireState.SENT, None),
            (2, FireState.SKIPPED, "2026-12-25: Christmas Day, holidays:GB → skipped"),
            (3, FireState.SENT, "2026-12-26: in freeze → moved to 2026-12-28"),
        ]
    ]
    with engine.begin() as conn:
        insert_fires(conn, models, fires, now)
    assert migrate(engine, "gaffer_", "0006")[1] == "0006"
    table = table_of(models.Fire)
    with engine.connect() as conn:
        left = conn.execute(select(table.c.state, table.c.nominal_at)).all()
    assert sorted(state for state, _ in left) == ["sent", "sent"]
    assert migrate(engine, "gaffer_")[1] != "0006"


def test_a_date_added_meanwhile_by_another_transaction_is_not_an_error(empty_url: str) -> None:
    engine = get_engine(parse_database_url(empty_url))
    models = models_for("gaffer_")
    migrate(engine, "gaffer_")
    days = table_of(models.CalendarDay)
    with engine.begin() as conn:
        stored.add_days(conn, models, "freeze", [date(2026, 12, 1)])

    done: list[bool] = []

    def other_adds(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        # Between this add's read of the calendar and its insert, another add of the
        # same date commits (as two ``calendars add`` running at once).
        if not done and statement.lstrip().upper().startswith("SELECT"):
            done.append(True)
            conn.execute(insert(days).values(calendar="freeze", day=date(2026, 12, 24)))

    event.listen(engine, "after_cursor_execute", other_adds)
    try:
        with engine.begin() as conn:
            new = [date(2026, 12, 24), date(2026, 12, 25)]
            added = stored.add_days(conn, models, "freeze", new)
    finally:
        event.remove(engine, "after_cursor_execute", other_adds)
    assert done
    assert added == [date(2026, 12, 25)]
    with engine.connect() as conn:
        found = stored.load_calendars(conn, models)
    assert found == {"freeze": frozenset({date(2026, 12, d) for d in (1, 24, 25)})}
