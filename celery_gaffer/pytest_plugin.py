"""The pytest plugin (entry point ``pytest11``, name ``gaffer``): the ``gaffer_beat`` fixture.

``gaffer_beat`` is a ``celery_gaffer.testing.GafferBeat``: the real Scheduler on
a virtual clock, over a throwaway SQLite file of the test session (or the database of
``--gaffer-database-url`` / the ``gaffer_database_url`` ini option, whose Gaffer tables
it empties before each test) and kombu's in-memory broker. Its app is ``gaffer_app``:
Celery's ``celery_app`` fixture (``celery.contrib.pytest``) when it is there, else a
bare app; override ``gaffer_app`` to rehearse your own.

Loading the plugin imports nothing of celery-gaffer and wires nothing: fixtures only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import pytest

__all__ = ["gaffer_app", "gaffer_beat", "gaffer_database_url"]

#: The app settings ``gaffer_beat`` sets for the test, put back after it.
_BROKER = {"broker_url": "memory://", "broker_write_url": None, "broker_transport": None}
#: Celery's environment variables that win over ``broker_url`` (unset for the test).
_BROKER_VARIABLES = ("CELERY_BROKER_URL", "CELERY_BROKER_WRITE_URL", "CELERY_BROKER_READ_URL")
#: The databases and prefixes migrated in each test session (pytest's config); a plain
#: mapping, not ``config.stash``, so that loading the plugin works on any pytest.
_MIGRATED: WeakKeyDictionary[Any, set[tuple[str, str]]] = WeakKeyDictionary()


def pytest_addoption(parser: pytest.Parser) -> None:
    help_text = (
        "database URL of the gaffer_beat fixture (default: a SQLite file of the test "
        "session); its Gaffer tables are migrated and emptied before each test"
    )
    parser.addoption("--gaffer-database-url", default=None, help=help_text)
    parser.addini("gaffer_database_url", help_text, default="")


@pytest.fixture(scope="session")
def gaffer_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The database URL ``gaffer_beat`` uses: ``--gaffer-database-url``, the
    ``gaffer_database_url`` ini option, or a SQLite file of the session."""
    given = request.config.getoption("--gaffer-database-url") or request.config.getini(
        "gaffer_database_url"
    )
    if given:
        return str(given)
    path: Path = tmp_path_factory.mktemp("gaffer-beat") / "gaffer.sqlite3"
    return f"sqlite:///{path}"


@pytest.fixture
def gaffer_app(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The Celery app ``gaffer_beat`` rehearses: ``celery_app`` (celery.contrib.pytest)
    when that fixture exists, else a new app. Override it to return your own."""
    try:
        yield request.getfixturevalue("celery_app")
        return
    except pytest.FixtureLookupError:
        pass
    from celery import Celery

    app = Celery("gaffer_beat", set_as_current=False)
    yield app
    app.close()


@pytest.fixture
def gaffer_beat(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    gaffer_app: Any,
    gaffer_database_url: str,
) -> Iterator[Any]:
    """A ``celery_gaffer.testing.GafferBeat`` over ``gaffer_app``, pointed at
    ``gaffer_database_url`` (migrated, its Gaffer tables emptied) and the in-memory
    broker for the test (Celery's ``CELERY_BROKER_*`` environment variables unset); the
    app's settings are put back afterwards."""
    from celery_gaffer.settings import forget_settings
    from celery_gaffer.store import database_for
    from celery_gaffer.store.retention import empty_tables
    from celery_gaffer.testing import GafferBeat, check_in_memory

    for variable in _BROKER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    app = gaffer_app
    settings = {**_BROKER, "gaffer_database_url": gaffer_database_url}
    saved = {name: app.conf.get(name) for name in settings}
    # The app's producer pool keeps the broker it was made for: dropped before and after,
    # so that the test's publishes go to memory:// and later ones to the app's own broker.
    _forget_producers(app)
    app.conf.update(settings)
    forget_settings(app)
    beat = None
    try:
        check_in_memory(app)
        database = database_for(app)
        migrated = _MIGRATED.setdefault(request.config, set())
        where = (gaffer_database_url, database.settings.table_prefix)
        if where not in migrated:
            database.migrate()
            migrated.add(where)
        empty_tables(database)
        beat = GafferBeat(app)
        yield beat
    finally:
        if beat is not None:
            beat.close()
        _forget_producers(app)
        app.conf.update(saved)
        forget_settings(app)


def _forget_producers(app: Any) -> None:
    """Drop the app's AMQP helper (a cached property, made again on next use), and with
    it the producer pool it made for the broker configured then."""
    with suppress(AttributeError):  # not made yet
        del app.amqp
