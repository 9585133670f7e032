"""What every importer shares: a candidate per source entry, compared with the stored
schedule of its name and written (or, in a dry run, only described) idempotently.

An import never half-writes: every source entry is read and checked first (any failure
of one entry makes it "cannot be mapped", with the reason), then the mapped entries that
differ from what is stored are written in one transaction, all or none, each recorded
in the audit log with source ``import`` and the store's actor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..exceptions import GafferError, ScheduleNotFound
from ..schedule_store import ScheduleStore
from ..schedules.spec import ScheduleSpec
from ..store.schedule_rows import StoredSchedule, policy_dict
from ..text import printable

ADDED, CHANGED, UNCHANGED, REFUSED = "added", "changed", "unchanged", "cannot be mapped"
#: How much of a reason or note a report line shows (a name: the default of printable).
SHOWN_REASON = 400


def reason_of(exc: BaseException) -> str:
    """Why one entry cannot be mapped: a GafferError's own message, else the exception's
    type and message (an unexpected failure still refuses only that entry)."""
    if isinstance(exc, GafferError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "nested too deeply to read (RecursionError)"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class ImportLine:
    """What the import does (or would do) to one entry."""

    name: str
    outcome: str
    detail: str = ""
    note: str | None = None

    def render(self) -> str:
        """One terminal line; the source's text escaped and cut (it may hold anything)."""
        detail = " ".join(self.detail.split())
        shown = f": {printable(detail, SHOWN_REASON)}" if detail else ""
        note = f" (note: {printable(self.note, SHOWN_REASON)})" if self.note else ""
        return f"{printable(self.name)}: {self.outcome}{shown}{note}"


@dataclass(frozen=True, slots=True)
class ImportReport:
    lines: list[ImportLine]
    dry_run: bool
    #: What was read, for the summary of an empty import ("beat_schedule").
    source: str = "beat_schedule"

    def count(self, outcome: str) -> int:
        return sum(1 for line in self.lines if line.outcome == outcome)

    @property
    def refused(self) -> int:
        """How many entries cannot be mapped (the CLI exits 1 when any)."""
        return self.count(REFUSED)

    def summary(self) -> str:
        if not self.lines:
            return f"no entries in {self.source}: nothing to import"
        counts = ", ".join(
            f"{self.count(outcome)} {outcome}" for outcome in (ADDED, CHANGED, UNCHANGED)
        )
        dry = " (dry run: nothing written)" if self.dry_run else ""
        return f"{len(self.lines)} entries: {counts}, {self.refused} cannot be mapped{dry}"


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


def refusal(name: str, exc: BaseException) -> Candidate:
    """The candidate for an entry whose reading or checking raised ``exc``."""
    return Candidate(name, None, reason_of(exc))


def apply_candidates(
    store: ScheduleStore, candidates: Iterable[Candidate], *, dry_run: bool, source: str
) -> ImportReport:
    """Add or replace each mapped candidate whose stored schedule differs (nothing when
    ``dry_run``), and report one line per candidate.

    Every candidate is built and compared before the first write; the writes are one
    transaction, so a failure leaves nothing written (and raises).
    """
    lines: list[ImportLine] = []
    writes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for candidate in list(candidates):
        if candidate.spec is not None and candidate.spec.name in seen:
            candidate = Candidate(
                candidate.name, None, "name: another entry of this import has the same name"
            )
        line, write = _plan(store, candidate)
        lines.append(line)
        if candidate.spec is not None:
            seen.add(candidate.spec.name)
        if write is not None:
            writes.append(write)
    if writes and not dry_run:
        # Recorded in the audit log as an import, by the store's actor.
        store.acting_as(store.audit_actor.name, "import").add_all(writes)
    return ImportReport(lines, dry_run, source)


def _plan(store: ScheduleStore, candidate: Candidate) -> tuple[ImportLine, dict[str, Any] | None]:
    """The line for ``candidate`` and the ``add_all`` entry that applies it (None: none)."""
    spec = candidate.spec
    if spec is None:
        return ImportLine(candidate.name, REFUSED, candidate.reason, candidate.note), None
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
        write = _entry(spec, replace=False, watermark=candidate.watermark)
        return ImportLine(spec.name, ADDED, detail, note), write
    changed = changed_fields(spec, current)
    if not changed:
        return ImportLine(spec.name, UNCHANGED, note=note), None
    write = _entry(spec, replace=True, watermark=None)
    return ImportLine(spec.name, CHANGED, ", ".join(changed), note), write


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


def _entry(spec: ScheduleSpec, *, replace: bool, watermark: datetime | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "task": spec.task,
        "schedule": spec.schedule,
        "args": spec.args,
        "kwargs": spec.kwargs,
        "options": spec.options,
        "gaffer": policy_dict(spec.policy),
        "replace": replace,
        "watermark_at": watermark,
    }


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
    "printable",
    "reason_of",
    "refusal",
    "stored",
]
