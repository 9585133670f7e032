"""Publishing fires through Celery's routing with real Redis: each fire reaches the queue
its task's route (or its own ``queue`` option) names, and each queue goes to kombu's
declaration cache once per publish batch rather than once per message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Exchange, Producer, Queue

from celery_gaffer.beat.publisher import PUBLISH_BATCH, declaring_once_a_batch, send
from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.store.fires import Fire
from celery_gaffer.store.schedules import Payload

from ...support import broker_messages

NOMINAL = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
#: Schedule i's task, and the queue its fire must reach.
ROUTES = [("t.a", {}, "alpha"), ("t.b", {}, "beta"), ("t.a", {"queue": "gamma"}, "gamma")]


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = Celery("routes-test", broker=redis_url, set_as_current=False)
    app.conf.task_routes = {"t.a": {"queue": "alpha"}, "t.b": {"queue": "beta"}}
    try:
        yield app
    finally:
        app.close()


def fires_and_payloads(count: int) -> tuple[list[Fire], dict[str, Payload], list[str]]:
    fires, payloads, queues = [], {}, []
    for i in range(count):
        task, options, queue = ROUTES[i % len(ROUTES)]
        name = f"s{i:04d}"
        nominal = NOMINAL + timedelta(seconds=i)
        key = fire_key(name, nominal)
        fires.append(Fire(i + 1, name, nominal, key, fire_task_id(key), "scheduled", 1))
        payloads[name] = Payload(task, [i], {}, dict(options))
        queues.append(queue)
    return fires, payloads, queues


def test_each_fire_reaches_its_route_and_each_queue_is_declared_once_a_batch(
    app: Celery, redis_url: str
) -> None:
    count = 2 * PUBLISH_BATCH + 30  # three publish batches
    fires, payloads, queues = fires_and_payloads(count)
    declared: list[str] = []

    class Spy(app.amqp.Producer):  # type: ignore[name-defined,misc]
        def maybe_declare(self, entity: Any, retry: bool = False, **policy: Any) -> Any:
            declared.append(entity.name)
            return super().maybe_declare(entity, retry, **policy)

    with app.connection_for_write() as connection:
        producer = declaring_once_a_batch(Spy)(connection, auto_declare=False)  # as Beat's
        published = send(app, fires, payloads, producer)
    assert len(published.sent) == count
    assert not published.refused

    for queue in ("alpha", "beta", "gamma"):
        expected = [fire.task_id for fire, q in zip(fires, queues, strict=True) if q == queue]
        got = [m["headers"]["id"] for m in broker_messages(redis_url, queue)]
        assert got == expected, queue
    assert broker_messages(redis_url, "celery") == []
    # kombu saw each queue once in each batch it appears in (not once per message)...
    per_batch = {(start // PUBLISH_BATCH, queue) for start, queue in enumerate(queues)}
    assert Counter(declared) == Counter(queue for _, queue in per_batch)
    # ... and declared each one on the broker (the Redis transport's bindings).
    client = redis.Redis.from_url(redis_url)
    try:
        for queue in ("alpha", "beta", "gamma"):
            assert client.exists(f"_kombu.binding.{queue}"), queue
    finally:
        client.close()


def test_each_message_carries_the_reprs_and_origin_celery_would_compute(
    app: Celery, redis_url: str
) -> None:
    # Fires sharing one payload's arguments (as schedules of one entry do), fires with
    # arguments of their own, deep and long arguments (Celery's limits apply), and a
    # schedule hiding its arguments with Celery's own ``argsrepr`` option.
    shared_args, shared_kwargs = [1, "two", {"three": [3]}], {"deep": [[[[["x"]]]]]}
    payloads = {
        "s0": Payload("t.a", shared_args, shared_kwargs, {}),
        "s1": Payload("t.a", shared_args, shared_kwargs, {}),
        "s2": Payload("t.a", ["x" * 5000], {"n": 2}, {}),
        "s3": Payload("t.a", [3], {}, {"argsrepr": "(<hidden>,)"}),
        "s4": Payload("t.a", [], {}, {}),
    }
    fires = []
    for i, name in enumerate(payloads):
        key = fire_key(name, NOMINAL)
        fires.append(Fire(i + 1, name, NOMINAL, key, fire_task_id(key), "scheduled", 1))
    with app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection, auto_declare=False)
        published = send(app, fires, payloads, producer)
    assert len(published.sent) == len(fires)
    headers = {m["headers"]["id"]: m["headers"] for m in broker_messages(redis_url, "alpha")}
    for fire in fires:
        payload = payloads[fire.schedule]
        # What Celery itself writes when given no reprs (send_task's message builder).
        celery_made = app.amqp.as_task_v2(fire.task_id, "t.a", payload.args, payload.kwargs)
        expected = celery_made.headers
        got = headers[fire.task_id]
        assert got["kwargsrepr"] == expected["kwargsrepr"], fire.schedule
        assert got["origin"] == expected["origin"]
        if fire.schedule == "s3":
            assert got["argsrepr"] == "(<hidden>,)"
        else:
            assert got["argsrepr"] == expected["argsrepr"], fire.schedule
    assert len(headers[fires[2].task_id]["argsrepr"]) < 1100  # Celery's limit held


def _queued(redis_url: str) -> int:
    return sum(len(broker_messages(redis_url, queue)) for queue in ("alpha", "beta", "gamma"))


@pytest.mark.parametrize("expiring", [False, True])
def test_no_fire_reaches_the_broker_before_its_commit_is_known(
    app: Celery, redis_url: str, expiring: bool
) -> None:
    if expiring:
        # The most broker operations a message can take: queues with x-expires, which
        # add an operation per priority step to each message, with every step there
        # is. kombu must still not flush the batch waiting for its commit early.
        app.conf.broker_transport_options = {"priority_steps": list(range(256))}
        app.conf.task_queues = [
            Queue(name, Exchange(name), name, expires=60) for name in ("alpha", "beta", "gamma")
        ]
    fires, payloads, _ = fires_and_payloads(PUBLISH_BATCH + 10)  # two publish batches
    seen: list[tuple[int, int]] = []
    built: list[Any] = []

    def committed() -> None:
        seen.append((len(built), _queued(redis_url)))

    with app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection, auto_declare=False)
        publish = producer.publish

        def counted(*args: Any, **kwargs: Any) -> Any:
            built.append(args)
            return publish(*args, **kwargs)

        producer.publish = counted
        published = send(app, fires, payloads, producer, wait_for_commit=committed)
    # Called once, before any of it was in Redis: with kombu's publish batches (5.7+)
    # after the first batch is built (the commit overlaps it); without, before the
    # first send (each message would go out at once).
    assert seen == [(PUBLISH_BATCH if hasattr(Producer, "batch") else 0, 0)]
    assert len(published.sent) == len(fires)
    assert _queued(redis_url) == len(fires)


def test_a_failed_commit_discards_the_batch_built_and_is_raised(
    app: Celery, redis_url: str
) -> None:
    fires, payloads, _ = fires_and_payloads(PUBLISH_BATCH + 10)

    class CommitFailed(Exception):
        pass

    def committed() -> None:
        raise CommitFailed("the fires' transaction failed")

    with app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection, auto_declare=False)
        with pytest.raises(CommitFailed):
            send(app, fires, payloads, producer, wait_for_commit=committed)
    assert _queued(redis_url) == 0


def test_on_a_producer_that_publishes_at_once_the_commit_is_waited_for_first() -> None:
    # kombu's in-memory transport has no publish batches: each message would be out as
    # soon as it is sent, so the commit must be known before the first send.
    app = Celery("memory-test", broker="memory://", set_as_current=False)
    fires, payloads, _ = fires_and_payloads(3)
    try:
        with app.connection_for_write() as connection:
            producer = app.amqp.Producer(connection, auto_declare=False)
            sends: list[str] = []
            publish = producer.publish

            def counted(*args: Any, **kwargs: Any) -> Any:
                sends.append("publish")
                return publish(*args, **kwargs)

            producer.publish = counted

            def committed() -> None:
                sends.append("committed")

            published = send(app, fires, payloads, producer, wait_for_commit=committed)

            def refused() -> None:
                raise RuntimeError("refused")

            with pytest.raises(RuntimeError, match="refused"):
                send(app, fires, payloads, producer, wait_for_commit=refused)
    finally:
        app.close()
    assert sends == ["committed", "publish", "publish", "publish"]  # none after the refusal
    assert len(published.sent) == 3
