"""Small test doubles and readers shared by the test folders."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import Any

import redis

QUEUE = "celery"


@dataclass
class FrozenClock:
    """A clock that moves only when told to (inject it; never sleep in unit tests)."""

    now: datetime = field(
        default_factory=lambda: datetime(2026, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
    )

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def broker_messages(redis_url: str, queue: str = QUEUE) -> list[dict[str, Any]]:
    """The messages waiting in a Redis-transport queue, oldest first, as decoded JSON."""
    client = redis.Redis.from_url(redis_url)
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    # kombu's Redis transport LPUSHes and BRPOPs: the oldest message is last.
    return [json.loads(item) for item in reversed(raw)]


def message_headers(redis_url: str, queue: str = QUEUE) -> list[dict[str, Any]]:
    return [message["headers"] for message in broker_messages(redis_url, queue)]


def empty_redis(redis_url: str) -> None:
    """Delete every key of the test's Redis database but the run's claim on it (FLUSHDB
    would drop the claim too, and the next test would refuse the database)."""
    from .redis_claim import OWNER_KEY, empty

    client = redis.Redis.from_url(redis_url)
    try:
        owner = client.get(OWNER_KEY)
    finally:
        client.close()
    empty(redis_url, owner.decode() if owner else "")


def gaffer_cli(app: Any, *args: str) -> Any:
    """``celery gaffer ARGS`` through click's runner, stdout and stderr kept apart."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from celery_gaffer.cli import gaffer

    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:  # click 8.2 always keeps stderr apart
        runner = CliRunner()
    return runner.invoke(gaffer, list(args), obj=SimpleNamespace(app=app))


@contextmanager
def noop_app(name: str, database_url: str, broker: str = "memory://", **conf: Any) -> Iterator[Any]:
    """A Celery app on ``database_url`` with the task ``t.noop`` (and ``conf``), closed after."""
    from celery import Celery

    app = Celery(name, broker=broker, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.update(conf)

    @app.task(name="t.noop", shared=False)
    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    try:
        yield app
    finally:
        app.close()


#: The signals that stop Beat.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def celerys_handler(_signum: int, _frame: FrameType | None) -> None:
    """Stands for Celery's stop handler, which would build a second Scheduler."""
    raise AssertionError("Celery's handler ran: it would build a second Scheduler")
