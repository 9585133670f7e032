"""Rehearse Beat in a test: the real Scheduler on a virtual clock (the ``gaffer_beat``
fixture of ``celery_gaffer.pytest_plugin`` hands out a ``GafferBeat``).

``GafferBeat`` ticks a real ``celery_gaffer.Scheduler`` at each moment Beat
would wake, with a clock that moves only when told to, and records what each tick
published (Celery's ``after_task_publish`` signal): the ledger, catch-up, starting
deadlines, bounds, jitter and the DST rules are the product's own. Nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from .exceptions import ConfigurationError, DatabaseUnavailable, GafferError, InvalidInput

__all__ = ["GafferBeat", "SentFire", "VirtualClock", "When", "aware", "check_in_memory"]

#: A time: an aware ``datetime``, or ISO 8601 text with an offset (``2027-03-28T03:00+02:00``).
When = datetime | str

#: Most ticks one ``GafferBeat.advance`` makes in a row at the same instant (a tick
#: that returns 0 has more to send now).
BUSY_TICKS = 1000
#: Most ticks one ``GafferBeat.advance`` makes in all.
MAX_TICKS = 200_000


def aware(value: When, name: str) -> datetime:
    """``value`` as an aware datetime; InvalidInput naming ``name`` when it is naive or
    not ISO 8601 text (a wall time alone is ambiguous around DST)."""
    parsed: datetime | None
    if isinstance(value, datetime):
        parsed = value
    else:
        text = str(value).strip()
        try:
            parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise InvalidInput(
            f"{name}: {value!r} is not an aware time: give a datetime with a tzinfo or ISO "
            "8601 text with an offset, such as 2027-03-28T03:00+02:00",
            field=name,
        )
    return parsed


def check_in_memory(app: Any) -> None:
    """ConfigurationError naming ``broker_url`` unless ``app`` publishes to kombu's
    in-memory transport (a rehearsal never reaches a real broker)."""
    with app.connection_for_write() as connection:
        driver = getattr(connection.transport, "driver_type", None)
    if driver != "memory":
        raise ConfigurationError(
            f"broker_url: a rehearsed Beat publishes to the in-memory broker only, and this "
            f"app's broker is {driver!r}: set broker_url to memory:// (and no "
            "broker_transport or broker_write_url)",
            field="broker_url",
        )


@dataclass
class VirtualClock:
    """A clock that moves only when told to: inject it as ``clock=``."""

    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc))

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True)
class SentFire:
    """One fire Beat published: ``nominal_at`` (UTC) is its schedule's time, ``sent_at``
    the virtual time it was sent (later after an outage, or by its jitter)."""

    schedule: str
    nominal_at: datetime
    sent_at: datetime
    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    key: str
    task_id: str


class GafferBeat:
    """A Beat on a virtual clock over the Gaffer database of ``app``.

    ``start(at)`` starts it (syncing the app's ``beat_schedule``, as Beat does when it
    starts); ``advance(to)`` ticks it at each moment Beat would wake up to ``to``;
    ``down(from_, to)`` stops it over a window and starts it again at ``to``, where
    catch-up happens; ``sent`` lists what it published. ``app`` must already point at
    the database (migrated) and a broker that keeps messages in memory: the fixture
    does both.
    """

    def __init__(self, app: Any, clock: VirtualClock | None = None) -> None:
        self.app = app
        self.clock = clock if clock is not None else VirtualClock()
        #: Every fire published so far, in the order sent.
        self.sent: list[SentFire] = []
        self._scheduler: Any = None
        self._ticking = False
        self._connected = False
        #: The routing keys of the messages published (their queues are purged at close).
        self._routes: set[str] = set()

    @property
    def now(self) -> datetime:
        """The virtual time."""
        return self.clock.now

    @property
    def store(self) -> Any:
        """A ``ScheduleStore`` of the app on the virtual clock (add schedules with it)."""
        from .schedule_store import ScheduleStore

        return ScheduleStore(self.app, clock=self.clock)

    @property
    def running(self) -> bool:
        """Whether Beat is running (started and not down)."""
        return self._scheduler is not None

    def start(self, at: When | None = None) -> GafferBeat:
        """Start Beat at ``at`` (default: the virtual time): the app's ``beat_schedule`` is
        synced and the first tick runs. InvalidInput naming ``at`` for a time before now."""
        if self.running:
            raise InvalidInput("start: Beat is already running", field="start")
        if at is not None:
            self._move_to(aware(at, "at"), "at")
        self._listen()
        from .scheduler import Scheduler

        try:
            self._scheduler = Scheduler(
                self.app, clock=self.clock, sleep=_no_sleep, sender_thread=False
            )
        except SystemExit as exc:  # Beat cannot start: its GafferError, not an exit
            if isinstance(exc.__cause__, GafferError):
                raise exc.__cause__ from None
            raise
        self._tick_until_idle()
        return self

    def advance(
        self, to: When | None = None, *, by: timedelta | float | None = None
    ) -> list[SentFire]:
        """Tick Beat at each moment it would wake, up to and at ``to`` (or ``by`` from now:
        a timedelta or seconds); the clock ends at ``to``. Returns the fires sent."""
        target = self._target(to, by)
        self._require_running("advance")
        first = len(self.sent)
        for _ in range(MAX_TICKS):
            delay = self._tick_until_idle()
            wake = self._next_wake(delay)
            if wake is None or wake >= target:
                break
            self.clock.now = wake
        else:  # pragma: no cover - a schedule firing every second for days
            raise InvalidInput(
                f"advance: more than {MAX_TICKS} ticks to reach {target}", field="to"
            )
        if self.clock.now < target:
            self.clock.now = target
            self._tick_until_idle()
        return self.sent[first:]

    def down(
        self,
        from_: When | None = None,
        to: When | None = None,
        *,
        by: timedelta | float | None = None,
    ) -> list[SentFire]:
        """Beat is down from ``from_`` (default: now; Beat runs until then) to ``to`` (or
        for ``by``): the clock jumps with no tick, then a Beat starts at ``to`` and its first
        tick sends what the schedules' catch-up policies say. Returns the fires sent then."""
        if from_ is not None:
            self.advance(to=from_)
        target = self._target(to, by)
        self._require_running("down")
        self.stop()
        self.clock.now = target
        first = len(self.sent)
        self.start()
        return self.sent[first:]

    def stop(self) -> None:
        """Stop Beat (as at shutdown: the held fires not sent are given back)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.close()

    def close(self) -> None:
        """Stop Beat, stop recording what is published, and empty the in-memory queues
        it published to (kombu keeps them for the whole process: a later test's
        in-process worker would otherwise run this test's fires)."""
        self.stop()
        if self._connected:
            from celery import signals

            signals.after_task_publish.disconnect(self._published)
            self._connected = False
        if self._routes:
            with self.app.connection_for_write() as connection:
                if getattr(connection.transport, "driver_type", None) == "memory":
                    for route in sorted(self._routes):
                        connection.default_channel.queue_purge(route)
            self._routes.clear()

    def sent_of(self, schedule: str) -> list[SentFire]:
        """The fires of ``schedule`` sent so far."""
        return [fire for fire in self.sent if fire.schedule == schedule]

    # -- internals ---------------------------------------------------------------------

    def _target(self, to: When | None, by: timedelta | float | None) -> datetime:
        if (to is None) == (by is None):
            raise InvalidInput("give either to or by", field="to")
        if to is not None:
            target = aware(to, "to")
        else:
            step = by if isinstance(by, timedelta) else timedelta(seconds=float(by or 0))
            target = self.clock.now + step
        if target < self.clock.now:
            raise InvalidInput(
                f"to: {target.isoformat()} is before the virtual time {self.clock.now.isoformat()}",
                field="to",
            )
        return target

    def _move_to(self, when: datetime, name: str) -> None:
        if self._scheduler is not None and when < self.clock.now:
            raise InvalidInput(f"{name}: the virtual clock does not go back", field=name)
        self.clock.now = when

    def _require_running(self, what: str) -> None:
        if self._scheduler is None:
            raise InvalidInput(
                f"{what}: Beat is not running: call start(at=...) first", field="start"
            )

    def _tick_until_idle(self) -> float:
        """Tick at the current instant until a tick has nothing more to send now."""
        self._ticking = True
        try:
            for _ in range(BUSY_TICKS):
                delay = float(self._scheduler.tick())
                if delay > 0:
                    return delay
        finally:
            self._ticking = False
        return 0.0

    def _next_wake(self, delay: float) -> datetime | None:
        """When Beat next has work: the earliest of the database's next due times after
        now, and the tick's own delay when something other than its cap set it."""
        from .beat.held import CLAIM_AHEAD
        from .store.schedules import probe

        database = self._scheduler.database
        with database.autocommit() as conn:
            due = probe(
                conn,
                database.models,
                confirm=database.settings.confirm_delivery_after is not None,
                claim_ahead=CLAIM_AHEAD,
            )
        now = self.clock.now
        candidates = (due.next_fire_at, due.check_at, due.publish_after, due.confirm_after)
        times = [t for t in (*candidates, due.claim_at) if t is not None and t > now]
        if 0 < delay < self._scheduler.max_interval:
            times.append(now + timedelta(seconds=delay))
        return min(times, default=None)

    def _listen(self) -> None:
        if not self._connected:
            from celery import signals

            signals.after_task_publish.connect(self._published, weak=False)
            self._connected = True

    def _published(
        self,
        sender: Any = None,
        body: Any = None,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        **_: Any,
    ) -> None:
        """Celery's ``after_task_publish``: record a fire this Beat published."""
        if not self._ticking or not headers or not headers.get("gaffer_key"):
            return
        if routing_key:
            self._routes.add(routing_key)
        from .protocol import parse_nominal

        args: Any = ()
        kwargs: Any = {}
        task = headers.get("task") or sender
        if isinstance(body, (tuple, list)) and len(body) >= 2:  # protocol 2
            args, kwargs = body[0], body[1]
        elif isinstance(body, dict):  # protocol 1
            args, kwargs = body.get("args", ()), body.get("kwargs", {})
            task = body.get("task", task)
        nominal = parse_nominal(headers.get("gaffer_nominal_at"))
        self.sent.append(
            SentFire(
                schedule=str(headers.get("gaffer_schedule")),
                nominal_at=nominal if nominal is not None else self.clock.now,
                sent_at=self.clock.now,
                task=str(task),
                args=tuple(args or ()),
                kwargs=dict(kwargs or {}),
                key=str(headers["gaffer_key"]),
                task_id=str(headers.get("id") or ""),
            )
        )


def _no_sleep(seconds: float) -> None:
    """Beat's wait for its database at start-up: a rehearsal does not wait."""
    raise DatabaseUnavailable(
        "gaffer_database_url: the Gaffer database did not answer when the rehearsed Beat started"
    )
