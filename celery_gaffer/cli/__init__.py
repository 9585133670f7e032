"""``celery -A proj gaffer <command>``: the command line, a thin layer over the API."""

from __future__ import annotations

# Each module adds its commands to the group.
from . import explain, import_django, import_redbeat, imports, observe, schedules, update, web  # noqa: F401
from .base import gaffer

__all__ = ["gaffer"]
