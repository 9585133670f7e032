"""``install(app)``: the one call that wires celery-gaffer into a Celery app.

Importing celery_gaffer connects nothing; every receiver is connected here, with a
``dispatch_uid`` so that a second call for the same app is a no-op.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from .exceptions import ConfigurationError
from .runs import endings, recorder
from .runtime import runtime
from .settings import settings_for

logger = logging.getLogger("celery_gaffer")

_installed: dict[int, Any] = {}


def install(app: Any) -> None:
    """Wire celery-gaffer into ``app``: connect its receivers. Safe to call more than once.

    The ``gaffer_*`` settings are read and checked when first used, not here: this runs
    while Celery imports the app module, where an error reaches the user as Celery's
    "Unable to load celery application" traceback. A worker or Beat started with a bad
    setting ends with one line naming the key and exit status 2, as the CLI's commands
    do; anywhere else the first use raises ``ConfigurationError``.
    """
    if _installed.get(id(app)) is app:
        return
    signals.worker_process_init.connect(
        _reset_after_fork, weak=False, dispatch_uid="celery_gaffer.dispose_engines"
    )
    signals.celeryd_init.connect(
        _check_settings, weak=False, dispatch_uid="celery_gaffer.check_settings"
    )
    recorder.connect(app)
    # Run ends still queued (runs.endings) are written before a worker or its pool
    # process exits.
    for shutdown in (signals.worker_process_shutdown, signals.worker_shutdown):
        shutdown.connect(endings.flush, weak=False, dispatch_uid="celery_gaffer.flush_run_ends")
    _installed[id(app)] = app
    logger.debug("celery-gaffer installed on %s", app.main, extra={"action": "installed"})


def _check_settings(instance: Any = None, **_: Any) -> None:
    """A worker of an installed app reads its settings before it starts: a bad one ends
    it with one line naming the key and exit status 2 (SystemExit, which Celery's
    signal dispatch lets through), not a worker whose every run fails."""
    app = getattr(instance, "app", None)
    if app is None or not is_installed(app):
        return
    try:
        settings_for(app)
    except ConfigurationError as exc:
        logger.critical(
            "worker cannot start: %s",
            " ".join(str(exc).split()),
            extra={"action": "worker_cannot_start"},
        )
        raise SystemExit(2) from None


def is_installed(app: Any) -> bool:
    """Whether :func:`install` was called for ``app`` in this process."""
    return _installed.get(id(app)) is app


def _reset_after_fork(**_: Any) -> None:
    # A prefork child must not reuse its parent's pooled connections or threads: runtime()
    # starts afresh in a new process. The solo pool sends this signal in the same
    # process, where resetting would orphan the running renewer and engines.
    runtime()
