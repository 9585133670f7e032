"""``celery -A proj gaffer <command>``: the command line, a thin layer over the API."""

from __future__ import annotations

from . import observe, schedules  # noqa: F401 - each module adds its commands to the group
from .base import gaffer

__all__ = ["gaffer"]
