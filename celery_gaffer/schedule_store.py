"""``ScheduleStore``: add, update, pause, resume and remove schedules from code.

Schedules written here have source ``db``: the Beat's sync of ``beat_schedule`` never
touches them. Every method validates before it writes and writes in one transaction,
so bad input leaves nothing behind. Running Beats pick changes up on their next tick.
``preview_resume``, ``preview_backfill`` and ``preview_update`` say what those will do,
computed by the same code, and write nothing (the CLI's ``--dry-run``, the web console).

Every write records what it changed in the audit log (:mod:`.store.audit`), in its own
transaction: who (``actor``), through what (``audit_source``), the action and note, and
each changed field before and after. A write that fails leaves no entry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from . import schedule_sync
from .beat import triggers
from .exceptions import GafferError, InvalidInput, ScheduleExists
from .schedule_calendars import CalendarMethods
from .schedule_reads import (
    NOTE_LENGTH,
    ScheduleReads,
    backfill_window,
    check_editable,
    checked_note,
)
from .schedules import watermarks
from .schedules.changes import ScheduleChanges
from .schedules.preview import Preview as Preview
from .schedules.spec import ScheduleSpec, validate_entry
from .store import schedules as rows
from .store.audit import Actor, record, record_many
from .store.audit_changes import changes as audit_changes_of
from .store.calendars import loader
from .store.fires import Fire
from .store.schedule_bulk import ChunkRows, bulk_insert_schedules
from .store.schedule_rows import StoredSchedule, Timings, columns

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ScheduleStore(CalendarMethods, ScheduleReads):
    """Schedules from code (source ``db``); the CLI is a thin layer over this class.

    Its writes are recorded in the audit log as made by ``actor`` (None: the OS user)
    through ``audit_source`` (one of ``cli``, ``api``, ``console``, ``admin``, ``config``,
    ``import``, ``code``, ``beat``); ``acting_as`` gives a store writing as another.
    """

    # -- writing --------------------------------------------------------------------

    def add(
        self,
        name: str,
        task: str,
        schedule: Any,
        *,
        args: Any = (),
        kwargs: Any = None,
        options: Any = None,
        gaffer: Mapping[str, Any] | None = None,
        replace: bool = False,
        watermark_at: datetime | None = None,
    ) -> StoredSchedule:
        """Add a schedule; its first fire is its first nominal time after now.

        ``watermark_at`` (aware, not after now) starts a new schedule from that instant
        instead, as if it had last fired then: its catch-up policy decides about the fires
        since (an importer passes the old scheduler's last run). A replaced schedule keeps
        its own watermark. Raises ``ScheduleExists`` for an existing name unless
        ``replace=True``, and a ``GafferError`` naming the field for bad input.
        """
        spec = self._validate(
            name=name,
            task=task,
            schedule=schedule,
            args=args,
            kwargs=kwargs,
            options=options,
            gaffer=gaffer,
        )
        now = self._clock()
        start = None if watermark_at is None else _watermark(watermark_at, now)
        with self.database.begin() as conn:
            return self._put(conn, spec, now, start, replace=replace)

    def add_all(self, entries: Iterable[Mapping[str, Any]]) -> list[StoredSchedule]:
        """Add (or, with ``replace=True``, overwrite) each entry in one transaction.

        Entries are dicts of ``add``'s arguments, ``replace`` and ``watermark_at``
        included. All are validated before anything is written; then all are written or,
        on any failure (a name that exists without ``replace``), none.
        """
        known = self._known_tasks()
        now = self._clock()
        prepared = []
        for entry in entries:
            arguments = dict(entry)
            replace = bool(arguments.pop("replace", False))
            watermark_at = arguments.pop("watermark_at", None)
            spec = validate_entry(**_entry_arguments(arguments), known_tasks=known)
            start = None if watermark_at is None else _watermark(watermark_at, now)
            prepared.append((spec, start, replace))
        with self.database.begin() as conn:
            return [
                self._put(conn, spec, now, start, replace=replace)
                for spec, start, replace in prepared
            ]

    def add_many(self, entries: Iterable[Mapping[str, Any]], *, chunk_size: int = 5000) -> int:
        """Add many schedules (dicts with ``add``'s arguments), one transaction per chunk.

        Each chunk is validated whole before it is written, and written whole or not at
        all. A bad entry raises a GafferError naming its position and field; the chunks
        before it stay written. Returns the number of schedules added.

        ``entries`` is read on the calling thread, one entry at a time, the next chunk's
        while the current one is written.
        """
        if chunk_size < 1:
            raise InvalidInput("chunk_size: must be at least 1", field="chunk_size")
        known = self._known_tasks()
        iterator = iter(entries)
        timings = Timings()
        calendars = functools.cache(self._stored_dates)

        def next_chunk(first: int) -> ChunkRows:
            now = self._clock()
            return ChunkRows(
                iterator,
                chunk_size,
                first,
                lambda entry: self._entry_row(entry, known, now, timings, calendars),
            )

        added = 0
        current = next_chunk(0)
        while new_rows := current.validated():
            following = next_chunk(added + len(new_rows))
            # The next chunk is read and validated while this one streams to the server;
            # its errors are raised by ``validated``, once this chunk is written.
            self._write_chunk(new_rows, added, alongside=following.step)
            added += len(new_rows)
            current = following
        return added

    def update(
        self, name: str, *, note: str | None = None, **changes: Unpack[ScheduleChanges]
    ) -> StoredSchedule:
        """Change only the given fields of ``name``: ``task``, ``schedule``, ``cron``,
        ``every``, ``tz``, ``jitter``, ``args``, ``kwargs``, ``options``, ``gaffer`` (merged
        into the current options).

        Everything is validated, with ``add``'s rules, before one transaction writes the
        row. A paused schedule stays paused (``pause`` and ``resume`` change that, not
        ``gaffer={"enabled": ...}``); an error is cleared (the row passed the checks).
        When the timing changes (``schedule``, ``cron``, ``every``, ``tz`` or
        ``jitter``), the schedule starts again from now, as on ``resume``: its next fire
        is its first nominal time after the edit, so a fire of the new timing that fell
        before the edit is not sent; fires already decided are never sent again. Running
        Beats use the edit on their next tick.

        A schedule of source ``config`` can be changed too (to fix one in error at once,
        say), but Beat's next start puts back what ``app.conf.beat_schedule`` says: change
        it there to keep the change.

        Raises ``ScheduleNotFound``, and a ``GafferError`` naming the field for
        bad input; nothing is written then.
        """
        check_editable(changes)
        note = checked_note(note)
        now = self._clock()
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            spec, start, _ = self._edited(current, changes, now)
            spec = self._with_calendars(conn, spec)
            values = columns(spec, start.watermark_at, now, start.fired_count)
            rows.update_schedule(conn, self._models, name, values)
            return self._recorded(conn, "update", current, now, note)

    def pause(
        self, name: str, *, note: str | None = None, until: datetime | None = None
    ) -> StoredSchedule:
        """Stop firing ``name`` until ``resume``; fires while paused are never sent.

        ``note`` says why (kept on the schedule as ``paused_note`` and in the audit
        log). ``until`` (an aware datetime after now, else InvalidInput naming ``until``)
        is when Beat resumes it by itself, as ``resume`` does (``paused_until``): the
        fires from ``until`` on are sent, under the schedule's catch-up policy. Pausing a
        paused schedule with a note or a time replaces that one and keeps the other (a
        time already passed is dropped: the pause then lasts until resumed); with
        neither, it changes nothing. A note is at most 1,000
        characters.
        """
        now = self._clock()
        note = checked_note(note)
        if until is not None:
            until = _future(until, now)
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            values = self._enabled_values(current, False, now)
            if values is None and note is None and until is None:
                return current
            values = values or {"updated_at": now}
            kept_until = current.paused_until
            if kept_until is not None and kept_until <= now:
                kept_until = None  # passed: the pause goes on until resumed
            values.update(
                paused_note=current.paused_note if note is None else note,
                paused_until=kept_until if until is None else until,
            )
            rows.update_schedule(conn, self._models, name, values)
            return self._recorded(conn, "pause", current, now, note)

    def resume(self, name: str, *, note: str | None = None) -> StoredSchedule:
        """Fire ``name`` again from its first nominal time after now (its pause's note
        and time cleared)."""
        note = checked_note(note)
        now = self._clock()
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            values = self._enabled_values(current, True, now, loader(conn, self._models))
            if values is None:
                return current
            rows.update_schedule(conn, self._models, name, values)
            return self._recorded(conn, "resume", current, now, note)

    def resume_due(self, now: datetime | None = None, *, limit: int = 500) -> list[str]:
        """Resume, as ``resume`` does, the paused schedules whose ``paused_until`` is at
        or before ``now`` (default: the clock's now), at most ``limit``, in one
        transaction; returns their names. Each is recorded with the note "paused until
        <time> passed". On PostgreSQL rows another Beat holds are skipped, so a schedule
        is resumed once. One still in error stays paused, its time cleared, the entry
        saying why (action ``update``).

        The fires from ``paused_until`` on are then Beat's to send under the schedule's
        catch-up policy, as after a Beat was down: one at ``paused_until`` is sent even
        when this runs a little later."""
        when = self._clock() if now is None else now
        resumed: list[str] = []
        with self.database.read() as conn:
            # Most looks find none: a read, which takes no write lock (SQLite's included).
            if not rows.has_due_resumes(conn, self._models, when):
                return resumed
        with self.database.begin() as conn:
            calendars = loader(conn, self._models)
            for current in rows.lock_due_resumes(conn, self._models, when, limit):
                until = current.paused_until or when
                note = f"paused until {until.isoformat()} passed"
                action = "resume"
                try:
                    # From just before ``until``: its fire and the later ones are
                    # Beat's to send, by the catch-up policy, as for a Beat that was down.
                    values = self._enabled_values(current, True, until - _INSTANT, calendars) or {}
                    values["updated_at"] = when
                except GafferError as exc:
                    action, note = "update", f"{note}; not resumed: {exc}"
                    values = {"paused_until": None, "updated_at": when}
                else:
                    resumed.append(current.name)
                rows.update_schedule(conn, self._models, current.name, values)
                self._recorded(conn, action, current, when, note)
        return resumed

    def remove(self, name: str, *, note: str | None = None) -> None:
        """Delete ``name``; its ledger and run history stay for ``cleanup`` to expire."""
        note = checked_note(note)
        now = self._clock()
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            rows.delete_schedules(conn, self._models, [name])
            self._record(conn, "remove", name, now, note, audit_changes_of(current, None))

    def sync_config(self, beat_schedule: Mapping[str, Mapping[str, Any]]) -> None:
        """Make the ``config`` schedules match ``app.conf.beat_schedule``.

        New entries are added (first fire after now), changed ones updated (watermark and
        paused state kept), and config schedules no longer configured removed. Schedules
        of source ``db`` are never touched; a config entry with a db schedule's name is
        ignored with a warning. An entry that fails validation (an unknown task, Celery's
        ``crontab``...) is stored in ``error`` with the reason, logged once, and the
        others are synced as usual: one bad entry never stops Beat.
        """
        schedule_sync.sync_config(
            self.database,
            beat_schedule,
            known=self._known_tasks(),
            clock=self._clock,
            source=self._source,
            actor=Actor(self.audit_actor.name, "config"),
        )

    def trigger(self, name: str, *, note: str | None = None) -> str:
        """Publish one fire of ``name`` now, with its own key; returns the key."""
        note = checked_note(note)

        def recorded(conn: Connection, fires: list[Fire]) -> None:
            changes = {"key": [None, fires[0].key]}
            self._record(conn, "trigger", name, self._clock(), note, changes)

        fire = triggers.trigger(self.app, self.database, name, self._clock, recorded=recorded)
        return fire.key

    def backfill(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        limit: int = 10_000,
        note: str | None = None,
    ) -> triggers.BackfillReport:
        """Publish the fires of ``name`` in ``(start, end]`` that the ledger does not have
        (recorded in the audit log when it sends any)."""
        note = checked_note(note)
        with self.database.read() as conn:
            schedule = backfill_window(self._require(conn, name), loader(conn, self._models))

        def recorded(conn: Connection, fires: list[Fire]) -> None:
            sent = [start.isoformat(), end.isoformat(), len(fires)]
            changes = {"from": [None, sent[0]], "to": [None, sent[1]], "sent": [None, sent[2]]}
            self._record(conn, "backfill", name, self._clock(), note, changes)

        return triggers.backfill(
            self.app,
            self.database,
            name,
            schedule,
            start,
            end,
            self._clock,
            limit=limit,
            recorded=recorded,
        )

    # -- internals ------------------------------------------------------------------

    def _new_row(
        self,
        spec: ScheduleSpec,
        now: datetime,
        watermark: datetime | None = None,
        timings: Timings | None = None,
    ) -> dict[str, Any]:
        start = watermarks.added(spec, now, watermark)
        row = columns(spec, start.watermark_at, now, start.fired_count, timings)
        row.update(name=spec.name, source=self._source, created_at=now)
        return row

    def _entry_row(
        self,
        entry: Any,
        known: Mapping[str, Any] | None,
        now: datetime,
        timings: Timings,
        calendars: Callable[[], Mapping[str, frozenset[date]]],
    ) -> dict[str, Any]:
        """The new row of one of ``add_many``'s entries, validated (``calendars``: every
        stored calendar, read once for the whole load)."""
        spec = validate_entry(**_entry_arguments(entry), known_tasks=known)
        spec = self._spec_with_dates(spec, calendars, now)
        return self._new_row(spec, now, timings=timings)

    def _write_chunk(
        self,
        new_rows: Sequence[dict[str, Any]],
        added: int,
        alongside: Callable[[], None] | None = None,
    ) -> None:
        """Write ``add_many``'s validated ``new_rows`` in one transaction (``added``: how
        many were written before them; ``alongside``: see ``bulk_insert_schedules``)."""
        try:
            with self.database.begin() as conn:
                bulk_insert_schedules(conn, self._models, new_rows, alongside=alongside)
                # One entry per schedule, without its fields: a bulk load stays cheap.
                added_names: list[tuple[str | None, dict[str, Any]]] = [
                    (row["name"], {}) for row in new_rows
                ]
                record_many(conn, self._models, self.audit_actor, "add", added_names, self._clock())
        except IntegrityError as exc:
            last = added + len(new_rows) - 1
            raise ScheduleExists(
                f"name: a schedule in entries {added}-{last} already exists or is "
                f"repeated; that chunk was not written ({added} were added before it)",
                field="name",
            ) from exc

    def _put(
        self,
        conn: Connection,
        spec: ScheduleSpec,
        now: datetime,
        start: datetime | None,
        *,
        replace: bool,
    ) -> StoredSchedule:
        """``add``'s write of a validated ``spec``, in the caller's transaction."""
        spec = self._with_calendars(conn, spec)
        existing = self._row(conn, spec.name, lock=True)
        if existing is not None:
            if not replace:
                raise ScheduleExists(
                    f"name: a schedule named {spec.name!r} already exists "
                    "(pass replace=True to overwrite it)",
                    field="name",
                )
            kept = watermarks.kept(existing.standing, spec, now)
            values = columns(spec, kept.watermark_at, now, kept.fired_count)
            values["source"] = self._source
            if spec.policy.enabled:
                values.update(paused_note=None, paused_until=None)
            rows.update_schedule(conn, self._models, spec.name, values)
            return self._recorded(conn, "replace", existing, now, None)
        rows.insert_schedules(conn, self._models, [self._new_row(spec, now, start)])
        return self._recorded(conn, "add", None, now, None, spec.name)

    def _recorded(
        self,
        conn: Connection,
        action: str,
        before: StoredSchedule | None,
        now: datetime,
        note: str | None,
        name: str | None = None,
    ) -> StoredSchedule:
        """The schedule after a write, with the write recorded: what changed from ``before``
        (None: a new schedule, named ``name``)."""
        after = self._get(conn, before.name if before is not None else str(name))
        self._record(conn, action, after.name, now, note, audit_changes_of(before, after))
        return after

    def _record(
        self,
        conn: Connection,
        action: str,
        name: str,
        now: datetime,
        note: str | None,
        changes: Mapping[str, Sequence[Any]],
    ) -> None:
        record(conn, self._models, self.audit_actor, action, name, now, note=note, changes=changes)


#: Just before an instant: a watermark there leaves a fire at the instant to be sent.
_INSTANT = timedelta(microseconds=1)

__all__ = ["NOTE_LENGTH", "Preview", "ScheduleStore"]

_ADD_ARGUMENTS = frozenset({"name", "task", "schedule", "args", "kwargs", "options", "gaffer"})


def _entry_arguments(entry: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise InvalidInput(f"expected a dict of add() arguments, got {type(entry).__name__}")
    unknown = sorted(entry.keys() - _ADD_ARGUMENTS)
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not an argument of add()", field=unknown[0])
    for required in ("name", "task", "schedule"):
        if required not in entry:
            raise InvalidInput(f"{required}: missing", field=required)
    return dict(entry)


def _watermark(value: Any, now: datetime) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(
            f"watermark_at: expected an aware datetime, got {value!r}", field="watermark_at"
        )
    if value > now:
        raise InvalidInput(f"watermark_at: {value.isoformat()} is after now", field="watermark_at")
    return value.astimezone(timezone.utc)


def _future(value: Any, now: datetime) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"until: expected an aware datetime, got {value!r}", field="until")
    if value <= now:
        raise InvalidInput(f"until: {value.isoformat()} is not after now", field="until")
    return value.astimezone(timezone.utc)
