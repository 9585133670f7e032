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
    """Wire celery-gaffer into ``app``: validate its settings and connect its receivers.

    Safe to call more than once. Raises :class:`~celery_gaffer.ConfigurationError` when
    a ``gaffer_*`` setting is invalid.
    """
    try:
        settings = settings_for(app)
    except ConfigurationError as exc:
        # Raised while the app module loads, under Celery's "Unable to load" traceback:
        # the message names the key, and the frames inside celery-gaffer add nothing.
        raise ConfigurationError(str(exc), field=exc.field) from None
    if _installed.get(id(app)) is app:
        return
    signals.worker_process_init.connect(
        _reset_after_fork, weak=False, dispatch_uid="celery_gaffer.dispose_engines"
    )
    recorder.connect(app)
    # Run ends still queued (runs.endings) are written before a worker or its pool
    # process exits.
    for shutdown in (signals.worker_process_shutdown, signals.worker_shutdown):
        shutdown.connect(endings.flush, weak=False, dispatch_uid="celery_gaffer.flush_run_ends")
    _installed[id(app)] = app
    logger.debug(
        "celery-gaffer installed on %s (database %s)",
        app.main,
        settings.masked_url,
        extra={"action": "installed"},
    )


def is_installed(app: Any) -> bool:
    """Whether :func:`install` was called for ``app`` in this process."""
    return _installed.get(id(app)) is app


def _reset_after_fork(**_: Any) -> None:
    # A prefork child must not reuse its parent's pooled connections or threads: runtime()
    # starts afresh in a new process. The solo pool sends this signal in the same
    # process, where resetting would orphan the running renewer and engines.
    runtime()
