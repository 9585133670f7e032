"""How the console's pages write instants and names into HTML. Pure: no I/O.

An instant is a ``<time>`` element (see the ``moment`` macro in ``macros.html``): its
``datetime`` is UTC in ISO 8601 (what the page's script counts from when it shows "in 3
min"), its ``title`` the exact instant on the schedule's clock with its zone and in UTC.
A name wraps only at its separators (``-_./:@``), never inside a word, except a word too
long to fit a line, which is marked so that the stylesheet lets it break anywhere.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo

from markupsafe import Markup, escape

from ..readable import parse_instant
from ..schedules.display import when

UTC = timezone.utc
#: Where a name may wrap: after each of these (a ``<wbr>``).
_SEPARATED = re.compile(r"([-_./:@]+)")
#: A word longer than this may break anywhere (it would not fit a narrow column).
LONG_WORD = 24
#: An ISO 8601 instant with its offset, as actions word them in their messages (not one
#: inside a key: ``name@2026-12-05T09:00:00Z`` is copied as it is).
ISO_INSTANT = re.compile(
    r"(?<![@\w])\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})(?![\w:])"
)


def utc_iso(value: datetime) -> str:
    """``value`` in UTC as ISO 8601, to the second: ``2026-12-01T01:30:00Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exact_time(value: datetime, zone: tzinfo | None = None) -> str:
    """``value`` to the second on ``zone``'s clock with the zone's abbreviation and name,
    then in UTC: ``2026-12-05 10:00:00 CET, Europe/Berlin · 2026-12-05 09:00:00 UTC``
    (UTC alone when ``zone`` is None)."""
    utc = value.astimezone(UTC)
    in_utc = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    if zone is None:
        return in_utc
    local = utc.astimezone(zone)
    name = getattr(zone, "key", None) or str(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}, {name} · {in_utc}"


def breakable(name: str) -> Markup:
    """``name`` escaped, with a ``<wbr>`` after each separator and each word longer than
    :data:`LONG_WORD` in ``<span class="token">`` (which may break anywhere)."""
    parts = []
    for part in _SEPARATED.split(str(name)):
        if not part:
            continue
        if _SEPARATED.fullmatch(part):
            parts.append(escape(part) + Markup("<wbr>"))
        elif len(part) > LONG_WORD:
            parts.append(Markup('<span class="token">%s</span>') % part)
        else:
            parts.append(escape(part))
    return Markup("").join(parts)


def readable_instants(text: str, zone: tzinfo | None = None) -> str:
    """``text`` with each ISO 8601 instant in it written as the pages write one: on
    ``zone``'s clock with UTC in brackets (``2026-12-05 10:00 CET (09:00Z)``)."""

    def readable(found: re.Match[str]) -> str:
        try:
            return when(parse_instant(found.group(0)), zone)
        except ValueError:
            return found.group(0)

    return ISO_INSTANT.sub(readable, text)
