"""A fire's message headers, as the publisher spells them out, are FireHeaders' own."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_gaffer.beat.publisher import fire_headers
from celery_gaffer.protocol import FireHeaders, Overlap, fire_key, fire_task_id
from celery_gaffer.store.fires import Fire
from celery_gaffer.store.schedules import Payload

NOMINAL = datetime(2026, 3, 29, 3, 0, tzinfo=timezone(timedelta(hours=2)))


@pytest.mark.parametrize("overlap", [Overlap.ALLOW, Overlap.FORBID, Overlap.REPLACE])
@pytest.mark.parametrize("ping_url", [None, "https://hc-ping.com/abc"])
def test_fire_headers_are_those_of_fire_headers_for_the_fire(
    overlap: str, ping_url: str | None
) -> None:
    key = fire_key("nightly", NOMINAL)
    fire = Fire(1, "nightly", NOMINAL, key, fire_task_id(key), "scheduled", 1)
    payload = Payload("t.noop", [], {}, {}, overlap, ping_url=ping_url)
    expected = FireHeaders.for_fire("nightly", NOMINAL, key, overlap, ping_url).as_headers()
    assert fire_headers(fire, payload) == expected
    assert fire_headers(fire, payload)["gaffer_nominal_at"] == "2026-03-29T01:00:00Z"
    assert FireHeaders.of(fire_headers(fire, payload)).overlap == (
        None if overlap == Overlap.ALLOW else overlap
    )
