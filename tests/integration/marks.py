"""A table of labelled rows that integration tests write under a fence, and an app on it."""

from __future__ import annotations

from celery import Celery
from sqlalchemy import Integer, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import celery_gaffer
from celery_gaffer.store import database_for


class Base(DeclarativeBase):
    pass


class Mark(Base):
    __tablename__ = "test_marks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    label: Mapped[str] = mapped_column(String(200))


def marks_app(database_url: str, main: str) -> Celery:
    """A Celery app on ``database_url`` with Gaffer installed and an empty ``test_marks``."""
    app = Celery(main, broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = database_url
    celery_gaffer.install(app)
    engine = database_for(app).engine
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    return app


def marks(app: Celery) -> list[str]:
    """The labels written so far, in order."""
    with database_for(app).session() as s:
        return list(s.scalars(select(Mark.label).order_by(Mark.id)))
