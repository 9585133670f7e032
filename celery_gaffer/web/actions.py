"""The console's actions, shared by its pages and its API: read the input, preview, apply.

Resume, backfill and edit are previewed with ``ScheduleStore.preview_*`` (the rules the
operations themselves use) before they are applied; pause and trigger apply at once.
A pause takes an optional ``note`` and an optional ``until`` (an aware ISO 8601 time in
the future: Beat resumes the schedule then). Bad input raises a GafferError naming the
field; nothing is written then. Each action is done by the store acting as the caller
(its token's name) through the console or the API (:func:`store_for`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..exceptions import InvalidInput
from ..protocol import loads_json
from ..readable import parse_instant
from ..schedule_store import ScheduleStore
from ..schedules.preview import Preview
from .tokens import Token

logger = logging.getLogger("celery_gaffer.web")

#: What an edit may change, and how a form's text is read for each.
EDIT_FIELDS = (
    "cron",
    "every",
    "tz",
    "jitter",
    "task",
    "args",
    "kwargs",
    "options",
    "catchup",
    "overlap",
    "grace",
    "starting_deadline",
)
_POLICY_FIELDS = ("catchup", "overlap", "grace", "starting_deadline")
_NUMBER_FIELDS = ("every", "jitter", "grace", "starting_deadline")
_JSON_FIELDS = ("args", "kwargs", "options")
ACTIONS = ("pause", "resume", "trigger", "backfill", "edit", "remove")
#: Actions applied only once confirmed, after their preview was shown.
PREVIEWED = ("resume", "backfill", "edit")
#: Actions applied only once confirmed, after a page saying what they do (no preview).
CONFIRMED = ("remove",)
#: Longest note a pause takes.
NOTE_LENGTH = 1000
# An ISO 8601 time's offset: "Z" or "+01:00".
_OFFSET = re.compile(r"(Z|[+-]\d{2}:\d{2})$", re.IGNORECASE)


def store_for(store: ScheduleStore, caller: Token | None, source: str) -> ScheduleStore:
    """``store`` acting as ``caller`` (its token's name is the actor) through ``source``
    (``"console"`` or ``"api"``); ``store`` itself for no caller."""
    if caller is None:
        return store
    return store.acting_as(caller.name, source)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an applied action did, in one line, and its facts for the API."""

    message: str
    facts: dict[str, Any]


def edit_changes(given: Mapping[str, Any], *, from_form: bool) -> dict[str, Any]:
    """``ScheduleStore.update``'s keyword arguments from an edit form (text; empty means
    "keep") or a JSON object (typed values). InvalidInput names an unknown or bad field."""
    unknown = sorted(set(given) - set(EDIT_FIELDS))
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not an editable field", field=unknown[0])
    changes: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    for name in EDIT_FIELDS:
        if name not in given:
            continue
        value = given[name]
        if from_form:
            value = str(value).strip()
            if not value:
                continue
            value = _read_text(name, value)
        elif value is None:
            continue
        (policy if name in _POLICY_FIELDS else changes)[name] = value
    if policy:
        changes["gaffer"] = policy
    if not changes:
        raise InvalidInput(f"nothing to change: give at least one of {', '.join(EDIT_FIELDS)}")
    return changes


def _read_text(name: str, text: str) -> Any:
    if name in _NUMBER_FIELDS:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise InvalidInput(f"{name}: expected a number of seconds, got {text!r}", field=name)
        return number
    if name in _JSON_FIELDS:
        return loads_json(text, name)
    return text


def backfill_range(given: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """The ``(from, to]`` range of a backfill, read as ISO 8601 (naive means UTC)."""
    bounds = []
    for name in ("from", "to"):
        value = given.get(name)
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(f"{name}: expected an ISO 8601 time", field=name)
        try:
            bounds.append(parse_instant(value))
        except ValueError as exc:
            raise InvalidInput(f"{name}: {exc}", field=name) from exc
    return bounds[0], bounds[1]


def pause_options(given: Mapping[str, Any], now: datetime) -> tuple[str | None, datetime | None]:
    """A pause's ``note`` (None: none) and ``until`` (None: until resumed) from a form or
    a JSON object; empty means none. InvalidInput names a bad one."""
    note = given.get("note")
    if isinstance(note, str):
        note = note.strip() or None
    if note is not None and (not isinstance(note, str) or len(note) > NOTE_LENGTH):
        raise InvalidInput(f"note: expected text of at most {NOTE_LENGTH} characters", field="note")
    text = given.get("until")
    if text is None or (isinstance(text, str) and not text.strip()):
        return note, None
    expected = "an ISO 8601 time with its offset, such as 2026-12-01T09:00:00Z"
    if not isinstance(text, str) or not _OFFSET.search(text.strip()):
        raise InvalidInput(f"until: expected {expected}", field="until")
    try:
        until = parse_instant(text)
    except ValueError as exc:
        raise InvalidInput(f"until: {exc}", field="until") from exc
    if until <= now:
        raise InvalidInput(f"until: {text.strip()} is not in the future", field="until")
    return note, until


def preview(
    store: ScheduleStore, name: str, action: str, given: Mapping[str, Any], *, from_form: bool
) -> Preview:
    """What ``action`` would do to ``name``; writes nothing."""
    if action == "resume":
        return store.preview_resume(name)
    if action == "backfill":
        start, end = backfill_range(given)
        return store.preview_backfill(name, start, end)
    if action == "edit":
        return store.preview_update(name, **edit_changes(given, from_form=from_form))
    raise InvalidInput(f"action: {action!r} has no preview", field="action")


def apply(
    store: ScheduleStore,
    name: str,
    action: str,
    given: Mapping[str, Any],
    *,
    from_form: bool,
    now: datetime,
) -> Outcome:
    """Do ``action`` to ``name`` now (``now``: the console's clock), and log one line
    saying what was done."""
    outcome = _apply(store, name, action, given, from_form=from_form, now=now)
    logger.info("console: %s", outcome.message, extra={"action": f"web_{action}", "schedule": name})
    return outcome


def _apply(
    store: ScheduleStore,
    name: str,
    action: str,
    given: Mapping[str, Any],
    *,
    from_form: bool,
    now: datetime,
) -> Outcome:
    if action == "pause":
        note, until = pause_options(given, now)
        # What was kept: a pause without a note or a time keeps the one it had.
        stored = store.pause(name, note=note, until=until)
        until = stored.paused_until
        facts = {"paused": True, "paused_note": stored.paused_note, "paused_until": _iso(until)}
        if until is None:
            return Outcome(f"paused {name}: it fires again after it is resumed", facts)
        return Outcome(f"paused {name} until {_iso(until)}: then it resumes by itself", facts)
    if action == "resume":
        resumed = store.resume(name)
        next_fire = resumed.next_fire_at
        when = "-" if next_fire is None else f"{next_fire:%Y-%m-%dT%H:%M:%SZ}"
        return Outcome(f"resumed {name}: next fire {when}", {"paused": False})
    if action == "trigger":
        key = store.trigger(name)
        return Outcome(f"triggered {name}: one fire sent with key {key}", {"key": key})
    if action == "backfill":
        start, end = backfill_range(given)
        report = store.backfill(name, start, end)
        return Outcome(
            f"backfilled {name}: {report.sent} fires sent, {report.already} already in the ledger",
            {"sent": report.sent, "already": report.already},
        )
    if action == "edit":
        store.update(name, **edit_changes(given, from_form=from_form))
        return Outcome(f"updated {name}", {})
    if action == "remove":
        store.remove(name)
        return Outcome(f"removed {name}: its ledger and runs stay until cleanup", {"removed": True})
    raise InvalidInput(f"action: expected one of {', '.join(ACTIONS)}", field="action")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else f"{value:%Y-%m-%dT%H:%M:%SZ}"


def preview_json(found: Preview) -> dict[str, Any]:
    """A preview as the API returns it."""
    return {
        "summary": found.summary,
        "fires": [f"{fire:%Y-%m-%dT%H:%M:%SZ}" for fire in found.fires],
        "skipped": found.skipped,
    }
