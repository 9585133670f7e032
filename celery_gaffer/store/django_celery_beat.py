"""django-celery-beat's tables, read with SQLAlchemy Core for
``celery_gaffer.importers.django_celery_beat``: just the columns its Beat uses, from a
database given by URL (PostgreSQL or SQLite), only read.

SQLite's date columns are read as the text they hold (the importer parses each row's),
so that one date that does not parse refuses its row instead of failing the read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    inspect,
    select,
    type_coerce,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from ..exceptions import InvalidInput
from ..settings import mask_url, parse_database_url
from .database import driver_reason

FIELD = "--database-url"

metadata = MetaData()
periodic_task = Table(
    "django_celery_beat_periodictask",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String),
    Column("task", String),
    Column("interval_id", Integer),
    Column("crontab_id", Integer),
    Column("solar_id", Integer),
    Column("clocked_id", Integer),
    Column("args", Text),
    Column("kwargs", Text),
    Column("queue", String),
    Column("exchange", String),
    Column("routing_key", String),
    Column("headers", Text),
    Column("priority", Integer),
    Column("expires", DateTime(timezone=True)),
    Column("expire_seconds", Integer),
    Column("one_off", Boolean),
    Column("start_time", DateTime(timezone=True)),
    Column("enabled", Boolean),
    Column("last_run_at", DateTime(timezone=True)),
    Column("total_run_count", Integer),
    Column("date_changed", DateTime(timezone=True)),
)
crontab_schedule = Table(
    "django_celery_beat_crontabschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("minute", String),
    Column("hour", String),
    Column("day_of_week", String),
    Column("day_of_month", String),
    Column("month_of_year", String),
    Column("timezone", String),
)
interval_schedule = Table(
    "django_celery_beat_intervalschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("every", Integer),
    Column("period", String),
)
clocked_schedule = Table(
    "django_celery_beat_clockedschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("clocked_time", DateTime(timezone=True)),
)
solar_schedule = Table(
    "django_celery_beat_solarschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("event", String),
    Column("latitude", String),
    Column("longitude", String),
)


@dataclass(frozen=True, slots=True)
class Tables:
    """django-celery-beat's rows, as read: periodic tasks in id order, schedules by id.
    Dates are datetimes (PostgreSQL) or the text SQLite holds."""

    tasks: list[dict[str, Any]]
    crontabs: dict[int, dict[str, Any]]
    intervals: dict[int, dict[str, Any]]
    clocked: dict[int, dict[str, Any]]
    solar: dict[int, dict[str, Any]]


def read_tables(database_url: str) -> Tables:
    """Every row of django-celery-beat's tables at ``database_url`` (PostgreSQL or SQLite).

    Raises InvalidInput naming ``--database-url`` (the URL masked) when the database does
    not answer or the tables are missing.
    """
    url = parse_database_url(database_url, FIELD)
    masked = mask_url(url)
    connect_args = {"connect_timeout": 5} if url.get_backend_name() == "postgresql" else {}
    if url.get_backend_name() == "sqlite":
        # Never create an empty SQLite file for a mistyped path: open it read-only.
        path = url.database or ""
        url = url.set(database=f"file:{path}", query={"mode": "ro", "uri": "true"})
    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            missing = [
                t.name for t in metadata.sorted_tables if not inspect(conn).has_table(t.name)
            ]
            if missing:
                raise InvalidInput(
                    f"{FIELD}: django-celery-beat tables not found in {masked} "
                    f"({', '.join(missing)}): run its migrations or check the URL",
                    field=FIELD,
                )
            by_id = {
                table.name: {row["id"]: dict(row) for row in _rows(conn, table)}
                for table in (crontab_schedule, interval_schedule, clocked_schedule, solar_schedule)
            }
            tasks = [dict(row) for row in _rows(conn, periodic_task)]
    except SQLAlchemyError as exc:
        raise InvalidInput(
            f"{FIELD}: cannot read django-celery-beat's tables from {masked}: {driver_reason(exc)}",
            field=FIELD,
        ) from exc
    finally:
        engine.dispose()
    return Tables(
        tasks=tasks,
        crontabs=by_id[crontab_schedule.name],
        intervals=by_id[interval_schedule.name],
        clocked=by_id[clocked_schedule.name],
        solar=by_id[solar_schedule.name],
    )


def _rows(conn: Any, table: Table) -> list[Mapping[str, Any]]:
    as_text = conn.dialect.name == "sqlite"
    selected = [
        type_coerce(column, Text).label(column.name)
        if as_text and isinstance(column.type, DateTime)
        else column
        for column in table.columns
    ]
    result = conn.execute(select(*selected).order_by(table.c.id))
    return [row._mapping for row in result]


__all__ = ["FIELD", "Tables", "read_tables"]
