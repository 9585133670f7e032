"""A fire's message headers, as the publisher spells them out, are FireHeaders' own; a
publish batch passes each queue to kombu's declaration cache once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_gaffer.beat.publisher import declared_once, declaring_once_a_batch, fire_headers
from celery_gaffer.protocol import FireHeaders, Overlap, fire_key, fire_task_id
from celery_gaffer.store.fires import Fire
from celery_gaffer.store.schedules import Payload

NOMINAL = datetime(2026, 3, 29, 3, 0, tzinfo=timezone(timedelta(hours=2)))


@pytest.mark.parametrize("overlap", [Overlap.ALLOW, Overlap.FORBID, Overlap.REPLACE])
@pytest.mark.parametrize("ping_url", [None, "https://hc-ping.com/abc"])
@pytest.mark.parametrize("name", ["nightly", "a@b@2026-01-01T00:00:00Z"])
def test_fire_headers_are_those_of_fire_headers_for_the_fire(
    overlap: str, ping_url: str | None, name: str
) -> None:
    key = fire_key(name, NOMINAL)
    fire = Fire(1, name, NOMINAL, key, fire_task_id(key), "scheduled", 1)
    payload = Payload("t.noop", [], {}, {}, overlap, ping_url=ping_url)
    expected = FireHeaders.for_fire(name, NOMINAL, key, overlap, ping_url).as_headers()
    assert fire_headers(fire, payload) == expected
    assert fire_headers(fire, payload)["gaffer_nominal_at"] == "2026-03-29T01:00:00Z"
    assert FireHeaders.of(fire_headers(fire, payload)).overlap == (
        None if overlap == Overlap.ALLOW else overlap
    )


class _Kombu:
    """A producer whose ``maybe_declare`` records each entity it is given."""

    def __init__(self) -> None:
        self.channel: object = object()
        #: (id of the channel, entity) of each declaration kombu was asked for.
        self.declared: list[tuple[int, object]] = []
        self.fail = False

    def maybe_declare(self, entity: object, retry: bool = False, **policy: Any) -> bool:
        if self.fail:
            raise ConnectionError("broker gone")
        self.declared.append((id(self.channel), entity))
        return True


_Producer = declaring_once_a_batch(_Kombu)


def test_inside_declared_once_an_entity_goes_to_kombu_once_per_channel() -> None:
    producer, queue, other = _Producer(), object(), object()
    with declared_once(producer):
        assert producer.maybe_declare(queue, retry=True) is True
        assert producer.maybe_declare(queue, retry=True) is False  # not passed on again
        producer.maybe_declare(other)
        first = producer.channel
        producer.channel = object()  # a reconnect: a new channel, declared again
        producer.maybe_declare(queue)
        producer.maybe_declare(queue)
    assert producer.declared == [
        (id(first), queue), (id(first), other), (id(producer.channel), queue),
    ]  # fmt: skip
    producer.maybe_declare(queue)  # outside: every call goes to kombu
    producer.maybe_declare(queue)
    assert len(producer.declared) == 5


def test_a_failed_declaration_is_tried_again() -> None:
    producer, queue = _Producer(), object()
    with declared_once(producer):
        producer.fail = True
        with pytest.raises(ConnectionError):
            producer.maybe_declare(queue)
        producer.fail = False
        producer.maybe_declare(queue)
        producer.maybe_declare(queue)
    assert producer.declared == [(id(producer.channel), queue)]  # the failure not taken for one


def test_a_producer_of_another_class_is_left_as_it_is() -> None:
    plain, queue = _Kombu(), object()
    with declared_once(plain):
        plain.maybe_declare(queue)
        plain.maybe_declare(queue)
    assert len(plain.declared) == 2
    assert declaring_once_a_batch(_Producer) is _Producer


def test_a_new_channel_is_never_taken_for_the_old_one() -> None:
    # A reconnect drops the old channel; its successor may be allocated at its address.
    producer, queue = _Producer(), object()
    with declared_once(producer):
        producer.maybe_declare(queue)
        producer.channel = None
        producer.channel = object()
        producer.maybe_declare(queue)
    assert len(producer.declared) == 2
