"""Django's test runner with the Gaffer tables: ``TEST_RUNNER =
"celery_gaffer.contrib.django.testing.GafferTestRunner"``.

Gaffer reaches the test database through its own engine (a pool of connections of its
own), which Django's runner does not know: on PostgreSQL, dropping the test database at
the end would fail while those connections are open. The runner closes them first.
:func:`empty_gaffer_tables` empties the Gaffer tables between tests, which Django's
flush leaves alone (their models are unmanaged).
"""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner

from ...store import database_for, dispose_engines
from ...store.retention import empty_tables
from .conf import celery_app


class GafferTestRunner(DiscoverRunner):  # type: ignore[misc]  # Django ships no type hints
    """``DiscoverRunner`` that closes Gaffer's connections before the test databases are
    destroyed."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        dispose_engines()
        super().teardown_databases(old_config, **kwargs)


def empty_gaffer_tables(app: Any | None = None) -> None:
    """Delete every row of the Gaffer tables of ``app`` (default: the project's Celery app):
    schedules, fires, runs, keys, leases, cursors, audit..."""
    empty_tables(database_for(celery_app() if app is None else app))
