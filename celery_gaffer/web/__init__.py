"""The web console (``celery -A proj gaffer web``): schedules, runs, alerts and actions.

Needs the ``web`` extra (Starlette, Jinja2, uvicorn); imported only by the ``web``
command, never by ``celery_gaffer`` itself.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
