"""The privileges docs/deployment.md gives are the ones each process needs on PostgreSQL.

The page's SQL block is run as written, on a brand-new database, with its two role names
made unique for the run: the owner role migrates, and the application role then runs a
fenced, keyed task, records its runs and adds schedules. Making the partitions ahead
(Beat, ``gaffer cleanup``) works for the owner and is refused to the application role,
as the page says.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from celery import Celery
from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.exc import ProgrammingError

import celery_gaffer
from celery_gaffer import GafferTask, ScheduleStore, every
from celery_gaffer.store import database_for, dispose_engines, get_engine, migrate
from celery_gaffer.store.retention import cleanup

from ..docs_runner import DOCS
from .marks import Mark

pytestmark = pytest.mark.postgres


def _page_sql() -> tuple[str, str]:
    """The administrator's statements and the owner's, as the page shows them."""
    text = (DOCS / "deployment.md").read_text()
    found = re.search(r"^```sql\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert found, "docs/deployment.md has no sql block"
    admin, _, owner = found.group(1).partition("-- after `gaffer migrate`, as gaffer_owner")
    assert owner, "the sql block no longer says what the owner runs after migrate"
    return admin, owner


def _statements(sql: str, names: dict[str, str]) -> list[str]:
    for name, unique in names.items():
        sql = re.sub(rf"\b{name}\b", unique, sql)
    lines = [line.split("--")[0] for line in sql.splitlines()]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def roles(postgres_server: URL) -> Iterator[tuple[URL, URL]]:
    """A new database, and the page's two roles in it: (the owner's URL, the app's URL)."""
    run = uuid.uuid4().hex[:8]
    names = {"gaffer_owner": f"gaffer_docs_owner_{run}", "app": f"gaffer_docs_app_{run}"}
    database = postgres_server.set(database=f"gaffer_test_docs_{run}")
    with psycopg.connect(_libpq(postgres_server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database.database}"')
    admin, owner = _page_sql()
    try:
        with psycopg.connect(_libpq(database), autocommit=True) as conn:
            for statement in _statements(admin, names):
                conn.execute(statement)  # type: ignore[arg-type]
        owner_url = database.set(username=names["gaffer_owner"], password=None)
        migrate(get_engine(owner_url), "gaffer_")
        with psycopg.connect(_libpq(owner_url), autocommit=True) as conn:
            conn.execute("CREATE TABLE test_marks (id serial PRIMARY KEY, label varchar(200))")
            for statement in _statements(owner, names):
                conn.execute(statement)  # type: ignore[arg-type]
        yield owner_url, database.set(username=names["app"], password=None)
    finally:
        dispose_engines()
        with psycopg.connect(_libpq(postgres_server), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database.database}" WITH (FORCE)')
            for role in names.values():
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _app(url: URL, main: str) -> Celery:
    app = Celery(main, broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = url.render_as_string(hide_password=False)
    celery_gaffer.install(app)
    return app


def test_the_application_role_runs_fenced_keyed_tasks_and_edits_schedules(
    roles: tuple[URL, URL],
) -> None:
    _, app_url = roles
    app = _app(app_url, "docs_app")

    @app.task(base=GafferTask, bind=True, gaffer_key="mark:{label}", shared=False)
    def write_mark(self: GafferTask, label: str) -> str:
        with self.lease("marks", ttl=30), self.session() as session:
            session.add(Mark(label=label))
        return label

    assert write_mark.apply(("one",)).get() == "one"
    assert write_mark.apply(("one",)).get() is None  # its key is completed: duplicate
    database = database_for(app)
    with database.read() as conn:
        assert conn.execute(select(Mark.label)).scalars().all() == ["one"]
        states = conn.execute(select(database.models.JobRun.state)).scalars().all()
    assert sorted(states) == ["duplicate", "succeeded"]

    store = ScheduleStore(app, check_tasks=False)
    store.add("every-minute", "docs.noop", every(60))
    store.pause("every-minute")
    assert [schedule.name for schedule in store.list()] == ["every-minute"]


def test_only_the_owner_makes_the_partitions_ahead(roles: tuple[URL, URL]) -> None:
    owner_url, app_url = roles
    later = datetime.now(timezone.utc) + timedelta(days=30)  # past what migrate made
    with pytest.raises(ProgrammingError, match="permission denied"):
        cleanup(database_for(_app(app_url, "docs_app_cleanup")), later)
    report = cleanup(database_for(_app(owner_url, "docs_owner_cleanup")), later)
    assert report.runs == 0
