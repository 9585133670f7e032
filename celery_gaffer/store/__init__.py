"""The database layer: typed models, one engine per process, migrations."""

from __future__ import annotations

from .database import Database, database_for
from .engine import dispose_engines, get_engine, read_only, session_factory
from .migrate import current_revision, head_revision, migrate
from .models import Models, models_for

__all__ = [
    "Database",
    "Models",
    "current_revision",
    "database_for",
    "dispose_engines",
    "get_engine",
    "head_revision",
    "migrate",
    "models_for",
    "read_only",
    "session_factory",
]
