"""How the console's pages write instants and names (celery_gaffer.web.markup)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from celery_gaffer.web.markup import breakable, exact_time, readable_instants, utc_iso

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def test_a_name_may_wrap_after_its_separators_only() -> None:
    assert str(breakable("nightly-billing.eu_west")) == "nightly-<wbr>billing.<wbr>eu_<wbr>west"
    assert str(breakable("report")) == "report"


def test_a_name_is_escaped_and_a_word_too_long_for_a_line_may_break_anywhere() -> None:
    assert str(breakable("<b>&x")) == "&lt;b&gt;&amp;x"
    word = "a" * 30
    assert str(breakable(f"x-{word}")) == f'x-<wbr><span class="token">{word}</span>'


def test_an_instant_is_utc_iso_in_datetime_and_exact_with_its_zone_in_the_title() -> None:
    instant = datetime(2026, 12, 5, 9, 0, 30, tzinfo=UTC)
    assert utc_iso(instant.astimezone(BERLIN)) == "2026-12-05T09:00:30Z"
    assert exact_time(instant) == "2026-12-05 09:00:30 UTC"
    assert exact_time(instant, BERLIN) == (
        "2026-12-05 10:00:30 CET, Europe/Berlin · 2026-12-05 09:00:30 UTC"
    )


def test_a_flash_shows_its_instants_on_the_schedules_clock() -> None:
    text = "resumed billing: next fire 2026-12-05T09:00:00Z"
    assert (
        readable_instants(text, BERLIN)
        == "resumed billing: next fire 2026-12-05 10:00 CET (09:00Z)"
    )
    assert readable_instants(text) == "resumed billing: next fire 2026-12-05 09:00:00Z"
    assert readable_instants("paused until 2026-12-05T10:00+01:00.", BERLIN) == (
        "paused until 2026-12-05 10:00 CET (09:00Z)."
    )
    # A key is an identifier: kept as it is.
    keyed = "triggered x: one fire sent with key x@2026-12-05T09:00:00Z"
    assert readable_instants(keyed, BERLIN) == keyed
