"""The reading half of :class:`~celery_gaffer.schedule_store.ScheduleStore`: what a
store is made of, its previews (what an operation will do, computed by that
operation's own rules, writing nothing), the schedules and the audit log.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from .beat.plan import bounds_with_stored, policy_with_stored_calendars, with_checked_calendars
from .clock import Clock, utcnow
from .exceptions import GafferError, InvalidInput, ScheduleNotFound
from .protocol import Health
from .schedules import watermarks
from .schedules.bounds import Window
from .schedules.changes import ScheduleChanges, new_timing
from .schedules.kinds import Schedule
from .schedules.preview import (
    Preview,
    backfill_nominals,
    backfill_preview,
    count_fires,
    resume_preview,
    update_preview,
)
from .schedules.spec import ScheduleSpec, validate_entry, validate_name
from .store import Database, database_for
from .store import schedules as rows
from .store.audit import Actor, AuditEntry, default_actor, entries
from .store.calendars import load_calendars
from .store.previews import ledger_nominals
from .store.schedule_rows import StoredSchedule, columns, policy_dict

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack


class ScheduleReads:
    """A store of schedules, read: previews, schedules and the audit log (the writes are
    :class:`~celery_gaffer.schedule_store.ScheduleStore`'s)."""

    def __init__(
        self,
        app: Any,
        *,
        clock: Clock = utcnow,
        check_tasks: bool = True,
        source: str = "db",
        actor: str | None = None,
        audit_source: str = "code",
    ) -> None:
        self.app = app
        self.database: Database = database_for(app)
        self._clock = clock
        self._check_tasks = check_tasks
        self._source = source
        self.audit_actor: Actor = _actor(default_actor() if actor is None else actor, audit_source)

    def acting_as(self, actor: str, audit_source: str) -> Self:
        """This store (same app, database and clock) recording its writes as ``actor``
        through ``audit_source``."""
        acting = copy.copy(self)
        acting.audit_actor = _actor(actor, audit_source)
        return acting

    # -- previews: what an operation will do, by its own rules; nothing is written -------

    def preview_resume(self, name: str) -> Preview:
        """What ``resume`` would do now: the next fires, and how many fires that fell
        while ``name`` was paused (or in error) it does not send. Raises what ``resume``
        raises (a schedule still in error, say)."""
        now = self._clock()
        with self.database.read() as conn:
            current = self._with_dates(conn, self._require(conn, name))
        values = self._enabled_values(current, True, now)
        skipped = 0
        timing = None
        if values is not None and current.schedule is not None and "watermark_at" in values:
            skipped = count_fires(current.schedule, current.watermark_at, values["watermark_at"])
        if current.schedule is not None:
            watermark = current.watermark_at if values is None else values["watermark_at"]
            timing = current.policy.bounds.window(
                current.schedule, fired=current.fired_count, watermark=watermark
            )
        return resume_preview(
            current.name,
            current.schedule,
            paused=not current.enabled,
            in_error=current.error is not None,
            next_fire=current.next_fire_at if values is None else values["next_fire_at"],
            skipped=skipped,
            timing=timing,
        )

    def preview_backfill(
        self, name: str, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> Preview:
        """What ``backfill`` would do now: the fires it sends (the first 20) and how
        many of the range the ledger has already. Raises what ``backfill`` raises."""
        now = self._clock()
        with self.database.read() as conn:
            schedule = backfillable(self._require(conn, name))
            nominals = backfill_nominals(schedule, start, end, now, limit=limit)
            ledger = ledger_nominals(conn, self._models, name, start, end) if nominals else set()
        sent = [nominal for nominal in nominals if nominal not in ledger]
        return backfill_preview(name, schedule, start, end, sent, len(nominals) - len(sent))

    def preview_update(self, name: str, **changes: Unpack[ScheduleChanges]) -> Preview:
        """What ``name`` would be after ``update`` now: its timing and next fires.
        Validates exactly as ``update`` does and raises the same errors."""
        check_editable(changes)
        now = self._clock()
        with self.database.read() as conn:
            current = self._require(conn, name)
            spec, start, new = self._edited(current, changes, now)
            spec = self._spec_with_dates(spec, lambda: load_calendars(conn, self._models), now)
        values = columns(spec, start.watermark_at, now, start.fired_count)
        timing = spec.policy.bounds.window(
            spec.schedule, fired=start.fired_count, watermark=start.watermark_at
        )
        return update_preview(
            spec.schedule,
            enabled=values["enabled"],
            next_fire=values["next_fire_at"],
            new_timing=new,
            timing=timing,
        )

    # -- reading --------------------------------------------------------------------

    def audit(
        self, name: str | None = None, *, since: datetime | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """The audit log, newest first: the entries of schedule ``name`` (None: of all),
        at or after ``since`` (aware), at most ``limit``."""
        if limit < 1:
            raise InvalidInput("limit: must be at least 1", field="limit")
        if since is not None and since.utcoffset() is None:
            raise InvalidInput(f"since: expected an aware datetime, got {since!r}", field="since")
        with self.database.read() as conn:
            return entries(conn, self._models, schedule=name, since=since, limit=limit)

    def get(self, name: str) -> StoredSchedule:
        """The schedule named ``name``, or ``ScheduleNotFound``."""
        with self.database.read() as conn:
            return self._get(conn, name)

    def list(self, *, limit: int | None = None) -> list[StoredSchedule]:
        """Schedules ordered by name (at most ``limit``)."""
        with self.database.read() as conn:
            return rows.list_schedules(conn, self._models, limit=limit)

    # -- internals ------------------------------------------------------------------

    @property
    def _models(self) -> Any:
        return self.database.models

    def _known_tasks(self) -> Mapping[str, Any] | None:
        if not self._check_tasks:
            return None
        self.app.loader.import_default_modules()
        tasks: Mapping[str, Any] = self.app.tasks
        return tasks

    def _validate(self, **entry: Any) -> ScheduleSpec:
        return validate_entry(**entry, known_tasks=self._known_tasks())

    @staticmethod
    def _spec_with_dates(
        spec: ScheduleSpec, load: Callable[[], Mapping[str, frozenset[date]]], now: datetime
    ) -> ScheduleSpec:
        """``spec`` with the dates of the stored calendars it names (``load``: every
        stored calendar, called only when it names one); a GafferError naming
        ``gaffer.skip_on`` when one does not exist, or when no fire after ``now``
        survives the calendars."""
        return with_checked_calendars(spec, load, now)

    def _stored_dates(self) -> Mapping[str, frozenset[date]]:
        """Every stored calendar's dates, by name, in a read of its own."""
        with self.database.read() as conn:
            return load_calendars(conn, self._models)

    def _with_dates(
        self,
        conn: Connection,
        current: StoredSchedule,
        load: Callable[[], Mapping[str, frozenset[date]]] | None = None,
    ) -> StoredSchedule:
        """``current`` with the dates of the stored calendars it names (read on ``conn``,
        or given by ``load``: every stored calendar), so that its next fires are the ones
        Beat sends; a GafferError naming ``gaffer.skip_on`` when one no longer exists."""
        rule = current.policy.bounds.calendar
        if rule is None or not rule.stored_names:
            return current
        names = rule.stored_names
        found = load or (lambda: load_calendars(conn, self._models, names))
        return replace(current, policy=policy_with_stored_calendars(current.policy, found))

    def _enabled_values(
        self,
        current: StoredSchedule,
        enabled: bool,
        now: datetime,
        calendars: Callable[[], Mapping[str, frozenset[date]]] | None = None,
    ) -> dict[str, Any] | None:
        """The columns ``pause`` (``enabled`` False) or ``resume`` writes; None when it
        changes nothing. ``calendars`` gives the stored calendars (a resume's next fire
        applies those its schedule names)."""
        values: dict[str, Any] = {"enabled": enabled, "updated_at": now}
        if enabled and current.error is not None:
            # Resuming a schedule in error checks it again: cleared if its cause is
            # gone, refused with the reason if not.
            self._recheck(current)
            values["error"] = None
        elif current.policy.enabled == enabled:
            return None
        if enabled:
            values.update(paused_note=None, paused_until=None)
        if enabled and current.schedule is not None:
            start = watermarks.resumed(current.standing, now)
            bounds = current.policy.bounds
            if calendars is not None:
                bounds = bounds_with_stored(bounds, calendars)
            next_fire_at = watermarks.first_fire(
                current.schedule, bounds, start.watermark_at, start.fired_count
            )
            values.update(
                watermark_at=start.watermark_at, next_fire_at=next_fire_at, check_at=next_fire_at
            )
        else:
            # Paused: no next fire; the watermark and count stay.
            values.update(next_fire_at=None, check_at=None, health=Health.OK)
        return values

    def _edited(
        self, current: StoredSchedule, changes: ScheduleChanges, now: datetime
    ) -> tuple[ScheduleSpec, watermarks.Start, bool]:
        """What ``update`` writes for ``changes`` to ``current``: the validated spec, where
        its firing resumes from (:func:`~.schedules.watermarks.edited`) and whether the
        timing is new."""
        name = current.name
        policy = policy_dict(current.policy)
        given = changes.get("gaffer") or {}
        if "enabled" in given and given["enabled"] != policy.get("enabled"):
            # resume starts from now; a watermark left at the pause would send or
            # miss the paused fires.
            raise InvalidInput(
                "gaffer.enabled: pause or resume the schedule instead", field="enabled"
            )
        policy.update(given)
        if "skip_on" in given and not given["skip_on"] and "on_skip" not in given:
            policy["on_skip"] = None  # off its calendars: what a fire on their dates did too
        timing = new_timing(name, current.schedule, changes)
        if timing == current.schedule:
            timing = None  # the same timing: its backlog is kept
        spec = self._validate(
            name=name,
            task=changes.get("task", current.task),
            schedule=current.schedule if timing is None else timing,
            args=changes.get("args", current.args),
            kwargs=changes.get("kwargs", current.kwargs),
            options=changes.get("options", current.options),
            gaffer=policy,
        )
        new = timing is not None
        return spec, watermarks.edited(current.standing, spec, now, new_timing=new), new

    def _recheck(self, current: StoredSchedule) -> ScheduleSpec:
        """``current`` validated again, or InvalidInput saying why it is still in error."""
        try:
            if current.schedule is None:
                raise InvalidInput(str(current.error))
            policy = policy_dict(current.policy)
            policy.pop("enabled")
            return self._validate(
                name=current.name,
                task=current.task,
                schedule=current.schedule,
                args=current.args,
                kwargs=current.kwargs,
                options=current.options,
                gaffer=policy,
            )
        except GafferError as exc:
            raise InvalidInput(
                f"name: schedule {current.name!r} is still in error: {exc}", field="name"
            ) from exc

    def _row(self, conn: Connection, name: str, *, lock: bool = False) -> StoredSchedule | None:
        return rows.read_schedule(conn, self._models, validate_name(name), lock=lock)

    def _require(self, conn: Connection, name: str, *, lock: bool = False) -> StoredSchedule:
        row = self._row(conn, name, lock=lock)
        if row is None:
            raise ScheduleNotFound(f"name: no schedule named {name!r}", field="name")
        return row

    def _get(self, conn: Connection, name: str) -> StoredSchedule:
        return self._require(conn, name)


def _actor(name: str, audit_source: str) -> Actor:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"actor: expected a name, got {name!r}", field="actor")
    try:
        return Actor(name, audit_source)
    except ValueError as exc:
        raise InvalidInput(f"audit_{exc}", field="audit_source") from exc


#: Longest note a change takes (``pause(name, note=...)`` and the others).
NOTE_LENGTH = 1000


def checked_note(note: Any) -> str | None:
    """``note`` if it is None or text of at most :data:`NOTE_LENGTH` characters, else
    InvalidInput naming ``note``."""
    if note is not None and (not isinstance(note, str) or len(note) > NOTE_LENGTH):
        raise InvalidInput(f"note: expected text of at most {NOTE_LENGTH} characters", field="note")
    return note


def check_editable(changes: Mapping[str, Any]) -> None:
    unknown = sorted(set(changes) - set(ScheduleChanges.__annotations__))
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not an editable field", field=unknown[0])


def backfillable(current: StoredSchedule) -> Schedule:
    """The schedule a backfill of ``current`` enumerates; refused while it is in error."""
    if current.schedule is None or current.error is not None:
        raise InvalidInput(
            f"name: schedule {current.name!r} is in error: {current.error}", field="name"
        )
    return current.schedule


def backfill_window(
    current: StoredSchedule, calendars: Callable[[], Mapping[str, frozenset[date]]]
) -> Schedule | Window:
    """What a backfill of ``current`` walks: its schedule through its bounds and calendars
    (``calendars`` gives the stored ones), so a fire its calendar skips is not sent and a
    moved one is sent at its moved time, as Beat sends them."""
    bounds = bounds_with_stored(current.policy.bounds, calendars)
    return bounds.window(
        backfillable(current), fired=current.fired_count, watermark=current.watermark_at
    )
