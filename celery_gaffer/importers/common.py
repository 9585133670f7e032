"""What every importer shares: a candidate per source entry, compared with the stored
schedule of its name and written (or, in a dry run, only described) idempotently."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..exceptions import ScheduleNotFound
from ..schedule_store import ScheduleStore
from ..schedules.spec import ScheduleSpec
from ..store.schedule_rows import StoredSchedule, policy_dict

ADDED, CHANGED, UNCHANGED, REFUSED = "added", "changed", "unchanged", "cannot be mapped"


@dataclass(frozen=True, slots=True)
class ImportLine:
    """What the import does (or would do) to one entry."""

    name: str
    outcome: str
    detail: str = ""
    note: str | None = None

    def render(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        note = f" (note: {self.note})" if self.note else ""
        return f"{self.name}: {self.outcome}{detail}{note}"


@dataclass(frozen=True, slots=True)
class ImportReport:
    lines: list[ImportLine]
    dry_run: bool
    #: What was read, for the summary of an empty import ("beat_schedule").
    source: str = "beat_schedule"

    def count(self, outcome: str) -> int:
        return sum(1 for line in self.lines if line.outcome == outcome)

    def summary(self) -> str:
        if not self.lines:
            return f"no entries in {self.source}: nothing to import"
        counts = ", ".join(
            f"{self.count(outcome)} {outcome}" for outcome in (ADDED, CHANGED, UNCHANGED)
        )
        dry = " (dry run: nothing written)" if self.dry_run else ""
        return f"{len(self.lines)} entries: {counts}, {self.count(REFUSED)} cannot be mapped{dry}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One source entry: the validated schedule it maps to, or why it cannot be mapped.

    ``watermark``: the source's last run (a new schedule starts from it, as if it had last
    fired then), and ``watermark_from`` says where it came from ("from the shelve").
    ``note``: a difference the user should know of (a DST rule that differs).
    """

    name: str
    spec: ScheduleSpec | None
    reason: str = ""
    note: str | None = None
    watermark: datetime | None = None
    watermark_from: str = ""


def apply_candidates(
    store: ScheduleStore, candidates: Iterable[Candidate], *, dry_run: bool, source: str
) -> ImportReport:
    """Add or replace each mapped candidate whose stored schedule differs (nothing when
    ``dry_run``), and report one line per candidate."""
    lines = [_apply(store, candidate, dry_run) for candidate in candidates]
    return ImportReport(lines, dry_run, source)


def _apply(store: ScheduleStore, candidate: Candidate, dry_run: bool) -> ImportLine:
    spec = candidate.spec
    if spec is None:
        return ImportLine(candidate.name, REFUSED, candidate.reason, candidate.note)
    note = candidate.note
    current = stored(store, spec.name)
    if current is not None and not current.enabled and spec.policy.enabled:
        # The source says enabled: the import resumes it, from now (as resume does).
        resumed = "paused here, enabled in the source: resumed from now"
        note = resumed if note is None else f"{note}; {resumed}"
    if current is None:
        detail = f"{spec.task}, {spec.schedule!r}"
        if candidate.watermark is not None:
            detail += f", last run {candidate.watermark.isoformat()}"
            if candidate.watermark_from:
                detail += f" {candidate.watermark_from}"
        if not dry_run:
            _write(store, spec, replace=False, watermark=candidate.watermark)
        return ImportLine(spec.name, ADDED, detail, note)
    changed = changed_fields(spec, current)
    if not changed:
        return ImportLine(spec.name, UNCHANGED, note=note)
    if not dry_run:
        _write(store, spec, replace=True, watermark=None)
    return ImportLine(spec.name, CHANGED, ", ".join(changed), note)


def stored(store: ScheduleStore, name: str) -> StoredSchedule | None:
    try:
        return store.get(name)
    except ScheduleNotFound:
        return None


def changed_fields(spec: ScheduleSpec, current: StoredSchedule) -> list[str]:
    """The fields in which ``spec`` differs from the stored schedule of its name."""
    stored_timing = None if current.schedule is None else current.schedule.to_dict()
    pairs = {
        "task": (spec.task, current.task),
        "schedule": (spec.schedule.to_dict(), stored_timing),
        "args": (spec.args, current.args),
        "kwargs": (spec.kwargs, current.kwargs),
        "options": (spec.options, current.options),
        "gaffer": (policy_dict(spec.policy), policy_dict(current.policy)),
        "source": ("db", current.source),
        "error": (None, current.error),
    }
    return [field for field, (new, old) in pairs.items() if new != old]


def _write(
    store: ScheduleStore, spec: ScheduleSpec, *, replace: bool, watermark: datetime | None
) -> None:
    store.add(
        spec.name,
        spec.task,
        spec.schedule,
        args=spec.args,
        kwargs=spec.kwargs,
        options=spec.options,
        gaffer=policy_dict(spec.policy),
        replace=replace,
        watermark_at=watermark,
    )


__all__ = [
    "ADDED",
    "CHANGED",
    "REFUSED",
    "UNCHANGED",
    "Candidate",
    "ImportLine",
    "ImportReport",
    "apply_candidates",
    "changed_fields",
    "stored",
]
