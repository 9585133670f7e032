"""Whatever ``ScheduleStore`` accepts, Beat can fire and ``status`` can evaluate.

A property test on the embedded SQLite database: random schedules, policies and options,
some of them out of bounds. A refused entry must name its field and leave nothing
behind; an accepted one must tick (the clock anywhere up to year 9000) and be evaluated
without an exception and without going to ``error``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_gaffer import GafferError, Scheduler, ScheduleStore, cron, every
from celery_gaffer.beat.health import all_health
from celery_gaffer.store import database_for

from ...support import FrozenClock

UTC = timezone.utc
EXPRS = ["* * * * *", "30 2 * * *", "0 */6 * * 1-5", "@monthly", "0 0 29 2 *", "15 1 * * 0"]
ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kathmandu"]
SECONDS = st.one_of(
    st.none(),
    st.none(),
    st.floats(min_value=0, max_value=1e5, allow_nan=False),
    st.floats(min_value=0, max_value=1e12, allow_nan=False),
    st.sampled_from([0, 1, 59.5, 86400, 366 * 86400, 366 * 86400 + 1, 1e300, 3e11]),
)


@st.composite
def schedules(draw: st.DrawFn) -> dict[str, Any]:
    """The arguments of a schedule (built in the test: building it may be refused)."""
    jitter = draw(st.one_of(st.just(0), st.just(0), st.floats(min_value=0, max_value=1e6)))
    if draw(st.booleans()):
        return {"interval": draw(st.integers(min_value=1, max_value=10**9)), "jitter": jitter}
    expr, zone = draw(st.sampled_from(EXPRS)), draw(st.sampled_from(ZONES))
    return {"expr": expr, "tz": zone, "jitter": jitter}


def build(arguments: dict[str, Any]) -> Any:
    if "interval" in arguments:
        return every(arguments["interval"], jitter=arguments["jitter"])
    return cron(arguments["expr"], arguments["tz"], jitter=arguments["jitter"])


ACCEPTED: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Any:
    path = tmp_path_factory.mktemp("accepted") / "gaffer.sqlite3"
    path.write_bytes(sqlite_template.read_bytes())
    app = Celery("accepted", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = f"sqlite:///{path}"

    @app.task(name="t.noop", shared=False)
    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    yield app
    app.close()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    schedule=schedules(),
    grace=SECONDS,
    deadline=SECONDS,
    catchup=st.sampled_from(["latest", "all", "skip"]),
    overlap=st.sampled_from(["allow", "forbid", "replace"]),
    expires=SECONDS,
    later=st.sampled_from([timedelta(seconds=1), timedelta(days=400), timedelta(days=365 * 3000)]),
)
def test_an_accepted_schedule_ticks_and_is_evaluated_without_error(
    app: Celery,
    schedule: dict[str, Any],
    grace: float | None,
    deadline: float | None,
    catchup: str,
    overlap: str,
    expires: float | None,
    later: timedelta,
) -> None:
    clock = FrozenClock(datetime(2026, 3, 8, 6, 59, tzinfo=UTC))
    store = ScheduleStore(app, clock=clock)
    for stored in store.list():
        store.remove(stored.name)
    gaffer: dict[str, Any] = {"catchup": catchup, "overlap": overlap}
    if grace is not None:
        gaffer["grace"] = grace
    if deadline is not None and deadline > 0:
        gaffer["starting_deadline"] = deadline
    options = {} if expires is None or expires <= 0 else {"expires": expires}
    refused: GafferError | None = None
    try:
        store.add("p", "t.noop", build(schedule), gaffer=gaffer, options=options)
    except GafferError as exc:
        refused = exc
    if refused is not None:
        assert refused.field  # the refusal names the offending field...
        assert store.list() == []  # ...and nothing was written
        return
    ACCEPTED.append(schedule)
    scheduler = Scheduler(app, clock=clock)
    clock.now = clock.now + later
    scheduler.tick()
    scheduler.tick()
    [stored] = store.list()
    assert stored.error is None, stored.error
    database = database_for(app)
    with database.read() as conn:
        [health] = all_health(conn, database.models, clock(), database.settings)
    assert health.state != "error", health.error


def test_the_property_test_accepted_some_entries_of_each_kind() -> None:
    """Guards the test above: it must not pass by refusing everything."""
    assert sum("interval" in entry for entry in ACCEPTED) >= 5
    assert sum("expr" in entry for entry in ACCEPTED) >= 5
