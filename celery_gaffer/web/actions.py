"""The console's actions, shared by its pages and its API: read the input, preview, apply.

Resume, backfill and edit are previewed with ``ScheduleStore.preview_*`` (the rules the
operations themselves use) before they are applied; pause and trigger apply at once.
Bad input raises a GafferError naming the field; nothing is written then.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..exceptions import InvalidInput
from ..protocol import loads_json
from ..readable import parse_instant
from ..schedule_store import ScheduleStore
from ..schedules.preview import Preview

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
    store: ScheduleStore, name: str, action: str, given: Mapping[str, Any], *, from_form: bool
) -> Outcome:
    """Do ``action`` to ``name`` now, and log one line saying what was done."""
    outcome = _apply(store, name, action, given, from_form=from_form)
    logger.info("console: %s", outcome.message, extra={"action": f"web_{action}", "schedule": name})
    return outcome


def _apply(
    store: ScheduleStore, name: str, action: str, given: Mapping[str, Any], *, from_form: bool
) -> Outcome:
    if action == "pause":
        store.pause(name)
        return Outcome(f"paused {name}: it fires again after it is resumed", {"paused": True})
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


def preview_json(found: Preview) -> dict[str, Any]:
    """A preview as the API returns it."""
    return {
        "summary": found.summary,
        "fires": [f"{fire:%Y-%m-%dT%H:%M:%SZ}" for fire in found.fires],
        "skipped": found.skipped,
    }
