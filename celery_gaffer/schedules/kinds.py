"""Schedules: cron in any IANA zone, correct across DST, and elapsed-time intervals.

Pure logic, no I/O. Every schedule answers two questions in UTC, to the second:
``next_after(t)`` (the first fire strictly after ``t``) and ``fires_between(start, end)``
(every fire ``f`` with ``start < f <= end``). Both are Celery ``BaseSchedule`` subclasses,
so they also work in a plain ``beat_schedule`` with Celery's default scheduler.

The DST rules are in docs/dst.md; the cron engine is in :mod:`.cron_engine`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, TypeAlias

from celery.schedules import BaseSchedule, crontab
from celery.schedules import schedstate as _schedstate
from celery.utils.time import maybe_make_aware

from ..exceptions import InvalidSchedule
from ..protocol import jitter_delay
from .cron_engine import ZonedCron, aware_utc, expand_expr, is_fixed_time, load_zone

__all__ = [
    "At",
    "Cron",
    "Every",
    "GafferSchedule",
    "Schedule",
    "as_schedule",
    "at",
    "cron",
    "every",
    "schedule_from_dict",
]

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)
# Longer intervals could never have two fires between datetime.min and datetime.max.
_LONGEST_INTERVAL = (datetime.max - datetime.min) // _ONE_SECOND
# What ``is_due`` answers for a schedule with no fire left (cronsim looks 50 years
# ahead): check again in an hour; Celery caps it with beat_max_loop_interval anyway.
_IDLE_RECHECK_SECONDS = 3600.0


def _seconds(value: object, name: str) -> float:
    """A finite number of seconds from a number or a timedelta, else InvalidSchedule."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    # bool is an int, but ``jitter=True`` is a mistake, not one second.
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InvalidSchedule(
        f"{name} must be a finite number of seconds or a timedelta, got {value!r}", field=name
    )


#: Longest jitter (and, in ``spec``, grace and starting deadline): a year.
MAX_DELAY_SECONDS = 366 * 86400
#: Longest cron expression, in characters.
MAX_EXPR_LENGTH = 256
# The windows ``last_at_or_before`` looks back through, growing eightfold: a fire is
# found in a window of at most a few fires, and cronsim looks no further than 50 years.
_FIRST_WINDOW = timedelta(hours=1)
_LAST_WINDOW = timedelta(days=366 * 60)
# Where the shortest gap of a cron schedule is measured (a year, DST changes included).
_GAP_SAMPLE_FROM = datetime(2025, 12, 31, tzinfo=UTC)
_GAP_SAMPLE_FIRES = 2000


def _jitter_seconds(value: object) -> float:
    jitter = _seconds(value, "jitter")
    if not 0 <= jitter <= MAX_DELAY_SECONDS:
        raise InvalidSchedule(
            f"jitter must be between 0 and {MAX_DELAY_SECONDS} s (a year), got {value!r}",
            field="jitter",
        )
    return jitter


def _interval_seconds(value: object) -> int:
    if isinstance(value, timedelta):
        whole = value % _ONE_SECOND == timedelta(0)
        seconds = value // _ONE_SECOND if whole else 0
    else:
        number = _seconds(value, "interval")
        whole = number.is_integer()
        seconds = int(number) if whole else 0
    if not whole or not 1 <= seconds <= _LONGEST_INTERVAL:
        # Each fire needs its own second-precision key (see celery_gaffer.protocol.fire_key).
        raise InvalidSchedule(
            "interval must be a whole number of seconds, at least 1 (and within the range "
            f"of datetime), got {value!r}",
            field="interval",
        )
    return seconds


class GafferSchedule(BaseSchedule):  # type: ignore[misc]  # celery ships no type hints
    """What ``Cron`` and ``Every`` share: UTC fire times, jitter and Celery's contract.

    Instances are immutable values: equal when their ``to_dict()`` is equal, hashable,
    and picklable (they pickle as that dict; ``nowfun`` and ``app`` are not kept).
    """

    _jitter: float
    _identity_items: tuple[tuple[str, Any], ...]

    @property
    def jitter(self) -> float:
        """Most seconds a send may be delayed after its nominal time (see ``send_at``)."""
        return self._jitter

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire strictly after ``t`` (aware, any zone), as aware UTC.

        ``None`` when there is none (cron: no match within 50 years, or past year 9999).
        """
        return next(self._fires_after(aware_utc(t, "t")), None)

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Every fire ``f`` with ``start < f <= end``, ascending, aware UTC, no repeats.

        Both arguments are checked now, before the first fire is asked for.
        """
        after = aware_utc(start, "start")
        until = aware_utc(end, "end")
        return self._fires_until(after, until)

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The latest fire ``f <= t`` (aware, any zone), as aware UTC; None when there is
        none within 60 years. Its cost does not grow with how far back it lies: it looks
        back through windows that grow eightfold, from an hour."""
        until = aware_utc(t, "t")
        window = _FIRST_WINDOW
        while True:
            try:
                after = until - window
            except OverflowError:
                after = datetime.min.replace(tzinfo=UTC)
            last = None
            for last in self._fires_until(after, until):  # noqa: B007 - the last is wanted
                pass
            if last is not None or window >= _LAST_WINDOW or after.year == 1:
                return last
            window = min(window * 8, _LAST_WINDOW)

    def count_between(self, start: datetime, end: datetime, limit: int) -> int:
        """How many fires ``f`` with ``start < f <= end``, counting at most ``limit``."""
        count = 0
        for count, _fire in enumerate(self.fires_between(start, end), 1):
            if count >= limit:
                break
        return count

    def _fires_until(self, after: datetime, until: datetime) -> Iterator[datetime]:
        for fire in self._fires_after(after):
            if fire > until:
                return
            yield fire

    def _fires_after(self, after: datetime) -> Iterator[datetime]:
        """Fires strictly after ``after`` (aware UTC, whole second), ascending."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that ``schedule_from_dict`` turns back into an equal schedule."""
        raise NotImplementedError

    def send_at(self, key: str, nominal: datetime) -> datetime:
        """When to send the fire ``key`` due at ``nominal``: nominal plus its jitter delay.

        The delay is ``keys.jitter_delay(key, self.jitter)``, the same in every process,
        and the result is always strictly before the next fire after ``nominal``.
        """
        if not isinstance(nominal, datetime) or nominal.utcoffset() is None:
            raise InvalidSchedule(
                f"nominal must be a timezone-aware datetime, got {nominal!r}", field="nominal"
            )
        nominal_utc = nominal.astimezone(UTC)
        delay = jitter_delay(key, self._jitter)
        send = nominal_utc + timedelta(seconds=delay)
        if delay:
            following = self.next_after(nominal_utc)
            if following is not None and send >= following:
                send = following - _ONE_MICROSECOND
        return send

    # Celery's BaseSchedule contract.

    def maybe_make_aware(self, dt: datetime, naive_as_utc: bool = True) -> datetime:
        """Celery's reading of a naive datetime: UTC (by default), then the app's zone."""
        # BaseSchedule's version uses ``self.tz``, which ``Cron`` uses for its own zone.
        aware: datetime = maybe_make_aware(dt, self._app_timezone(), naive_as_utc=naive_as_utc)
        return aware

    def _app_timezone(self) -> tzinfo:
        zone: tzinfo = self.app.timezone
        return zone

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        """Time from now (``self.now()``) until the first fire after ``last_run_at``.

        Negative when that fire is overdue; ``timedelta.max`` when there is none.
        """
        due_at = self.next_after(self.maybe_make_aware(last_run_at))
        if due_at is None:
            return timedelta.max
        return due_at - self.maybe_make_aware(self.now())

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        """Celery's ``(is_due, next)``: due once the first fire after ``last_run_at`` has come.

        When due, ``next`` is the seconds from now to the following fire; when not, the
        seconds until the pending one.
        """
        now = self.maybe_make_aware(self.now())
        due_at = self.next_after(self.maybe_make_aware(last_run_at))
        if due_at is None:
            return _state(False, _IDLE_RECHECK_SECONDS)
        if due_at > now:
            return _state(False, (due_at - now).total_seconds())
        following = self.next_after(now)
        if following is None:
            return _state(True, _IDLE_RECHECK_SECONDS)
        return _state(True, (following - now).total_seconds())

    def __reduce__(self) -> tuple[Callable[[Mapping[str, Any]], Schedule], tuple[Any, ...]]:
        return schedule_from_dict, (self.to_dict(),)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GafferSchedule):
            return self._identity() == other._identity()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple[tuple[str, Any], ...]:
        """``to_dict()`` as sorted items, made once: a schedule never changes, and a bulk
        load hashes the few shared ones once an entry."""
        try:
            return self._identity_items
        except AttributeError:
            items = self._identity_items = tuple(sorted(self.to_dict().items()))
            return items


def _state(is_due: bool, next_seconds: float) -> tuple[bool, float]:
    state: tuple[bool, float] = _schedstate(is_due, next_seconds)
    return state


class Cron(GafferSchedule):
    """A five-field cron expression matched against wall-clock time in an IANA zone.

    Build it with ``cron``. DST follows Debian cron's rules (the DST rules page).
    """

    def __init__(
        self,
        expr: str,
        tz: str = "UTC",
        *,
        jitter: float | timedelta = 0,
        nowfun: Callable[[], datetime] | None = None,
        app: Any = None,
    ) -> None:
        if isinstance(expr, str) and len(expr) > MAX_EXPR_LENGTH:
            raise InvalidSchedule(
                f"expr: {len(expr)} characters is longer than {MAX_EXPR_LENGTH}", field="expr"
            )
        fields = expand_expr(expr)
        _refuse_nearest_weekday(expr, fields)
        zone = load_zone(tz)
        self._expr = " ".join(expr.split())
        self._tz = tz
        self._fixed_time = is_fixed_time(fields)
        self._engine = ZonedCron(fields, zone, self._fixed_time)
        self._jitter = _jitter_seconds(jitter)
        if self._jitter:
            gap = _shortest_gap(fields, tz, self._fixed_time)
            if gap is not None and self._jitter >= gap:
                raise InvalidSchedule(
                    f"jitter ({jitter!r}) must be smaller than the schedule's shortest gap "
                    f"between fires ({gap:g} s)",
                    field="jitter",
                )
        super().__init__(nowfun=nowfun, app=app)

    @property
    def expr(self) -> str:
        """The expression as given, whitespace normalised (macros are kept as written)."""
        return self._expr

    @property
    def tz(self) -> str:  # BaseSchedule.tz (the app's zone) is not used by this class
        """The IANA zone name the expression is matched in."""
        return self._tz

    @property
    def is_fixed_time(self) -> bool:
        """True unless the minute or hour field starts with ``*`` (macros: by expansion)."""
        return self._fixed_time

    def shortest_gap(self) -> float | None:
        """The shortest time between two fires in a year's sample, DST changes included, in
        seconds (None: fewer than two fires in 60 years)."""
        return _shortest_gap(expand_expr(self._expr), self._tz, self._fixed_time)

    def _fires_after(self, after: datetime) -> Iterator[datetime]:
        return self._engine.fires_after(after)

    @property
    def engine(self) -> ZonedCron:
        """The engine that maps its wall-clock matches to instants."""
        return self._engine

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire strictly after ``t`` (aware, any zone), as aware UTC; None when
        there is none within 50 years. Computed once per expression, zone and instant."""
        return _next_cron_fire(self._expr, self._tz, aware_utc(t, "t"))

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The latest fire ``f <= t`` (aware, any zone), as aware UTC; None when there is
        none within 60 years. Computed once per expression, zone and instant."""
        return _last_cron_fire(self._expr, self._tz, aware_utc(t, "t"))

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "cron", "expr": ..., "tz": ..., "jitter": float}``."""
        return {"kind": "cron", "expr": self._expr, "tz": self._tz, "jitter": self._jitter}

    def __repr__(self) -> str:
        jitter = f", jitter={self._jitter!r}" if self._jitter else ""
        return f"cron({self._expr!r}, tz={self._tz!r}{jitter})"


@functools.lru_cache(maxsize=4096)
def _refuse_nearest_weekday(expr: str, fields: str) -> None:
    """``15W`` (the weekday nearest the 15th) is not supported: refused by name, not with
    the cron parser's bare "Bad day-of-month". ``LW`` is."""
    for part in fields.split()[2].split(","):
        if part.upper().endswith("W") and part.upper() != "LW":
            raise InvalidSchedule(
                f"expr {expr!r}: {part!r} (the weekday nearest a day) is not supported; "
                "'LW' (the last weekday of the month) is",
                field="expr",
            )


def _last_cron_fire(expr: str, tz: str, until: datetime) -> datetime | None:
    """:meth:`Cron.last_at_or_before` as a pure value: tenants' schedules share a few
    timings, and a health survey asks each of them about the same instant."""
    return GafferSchedule.last_at_or_before(Cron(expr, tz), until)


@functools.lru_cache(maxsize=4096)
def _next_cron_fire(expr: str, tz: str, after: datetime) -> datetime | None:
    """:meth:`Cron.next_after` as a pure value, for the same reason."""
    return GafferSchedule.next_after(Cron(expr, tz), after)


@functools.lru_cache(maxsize=4096)
def _shortest_gap(fields: str, tz: str, fixed_time: bool) -> float | None:
    """:meth:`Cron.shortest_gap`, computed once per expression and zone (a pure value:
    every jittered schedule of a tick would otherwise walk a year of fires)."""
    engine = ZonedCron(fields, load_zone(tz), fixed_time)
    previous = None
    shortest: float | None = None
    for count, fire in enumerate(engine.fires_after(_GAP_SAMPLE_FROM)):
        if previous is not None:
            gap = (fire - previous).total_seconds()
            shortest = gap if shortest is None else min(shortest, gap)
        if count >= _GAP_SAMPLE_FIRES or fire - _GAP_SAMPLE_FROM > timedelta(days=400):
            break
        previous = fire
    return shortest


class Every(GafferSchedule):
    """Elapsed time: fires at ``anchor + k * interval`` for every integer ``k``.

    The anchor only sets the phase (fires before it exist too). Build it with ``every``.
    """

    def __init__(
        self,
        interval: float | timedelta,
        *,
        anchor: datetime | None = None,
        jitter: float | timedelta = 0,
        nowfun: Callable[[], datetime] | None = None,
        app: Any = None,
    ) -> None:
        self._interval = _interval_seconds(interval)
        self._step = timedelta(seconds=self._interval)
        self._anchor = EPOCH if anchor is None else aware_utc(anchor, "anchor")
        self._jitter = _jitter_seconds(jitter)
        if self._jitter >= self._interval:
            raise InvalidSchedule(
                f"jitter ({jitter!r}) must be smaller than the interval ({self._interval} s)",
                field="jitter",
            )
        super().__init__(nowfun=nowfun, app=app)

    @property
    def interval(self) -> int:
        """Seconds between fires (a whole number, at least 1)."""
        return self._interval

    @property
    def anchor(self) -> datetime:
        """An instant that is a fire (aware UTC, truncated to the second)."""
        return self._anchor

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire strictly after ``t``; ``None`` only past year 9999."""
        after = aware_utc(t, "t")
        steps = (after - self._anchor) // self._step + 1
        try:
            return self._anchor + steps * self._step
        except OverflowError:
            return None

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The latest fire ``f <= t``, by arithmetic; None only before year 1."""
        until = aware_utc(t, "t")
        steps = (until - self._anchor) // self._step
        try:
            return self._anchor + steps * self._step
        except OverflowError:
            return None

    def count_between(self, start: datetime, end: datetime, limit: int) -> int:
        """How many fires ``f`` with ``start < f <= end`` (by arithmetic, at most ``limit``)."""
        after, until = aware_utc(start, "start"), aware_utc(end, "end")
        if until <= after:
            return 0
        below = (after - self._anchor) // self._step
        upto = (until - self._anchor) // self._step
        return int(min(max(upto - below, 0), limit))

    def _fires_after(self, after: datetime) -> Iterator[datetime]:
        fire = self.next_after(after)
        try:
            while fire is not None:
                yield fire
                fire += self._step
        except OverflowError:
            return

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "every", "interval": int, "anchor": ISO 8601, "jitter": float}``."""
        return {
            "kind": "every",
            "interval": self._interval,
            "anchor": self._anchor.isoformat(),
            "jitter": self._jitter,
        }

    def __repr__(self) -> str:
        anchor = "" if self._anchor == EPOCH else f", anchor={self._anchor.isoformat()!r}"
        jitter = f", jitter={self._jitter!r}" if self._jitter else ""
        return f"every({self._interval}{anchor}{jitter})"


class At(GafferSchedule):
    """Fires once, at ``when`` (django-celery-beat's clocked one-off). Build it with ``at``.

    ``when`` is kept to the second, rounded up (a fire is never before the instant asked
    for); ``tz`` is the zone it was given in (an IANA zone, else UTC), for display only.
    """

    def __init__(
        self,
        when: datetime,
        *,
        tz: str | None = None,
        nowfun: Callable[[], datetime] | None = None,
        app: Any = None,
    ) -> None:
        moment = aware_utc(when, "when")
        if when.microsecond:
            moment += _ONE_SECOND
        self._when = moment
        zone = tz if tz is not None else getattr(when.tzinfo, "key", None)
        self._tz = "UTC" if zone is None else str(zone)
        load_zone(self._tz)
        self._jitter = 0.0
        super().__init__(nowfun=nowfun, app=app)

    @property
    def when(self) -> datetime:
        """The one fire (aware UTC, whole second)."""
        return self._when

    @property
    def tz(self) -> str:
        """The IANA zone ``when`` was given in (UTC for a fixed offset), for display."""
        return self._tz

    def count_between(self, start: datetime, end: datetime, limit: int) -> int:
        after, until = aware_utc(start, "start"), aware_utc(end, "end")
        return int(after < self._when <= until and limit > 0)

    def _fires_after(self, after: datetime) -> Iterator[datetime]:
        if self._when > after:
            yield self._when

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "at", "when": ISO 8601 UTC, "tz": zone}``."""
        return {"kind": "at", "when": self._when.isoformat(), "tz": self._tz}

    def __repr__(self) -> str:
        return f"at({self._when.astimezone(load_zone(self._tz)).isoformat()!r})"


#: Any schedule Gaffer stores.
Schedule: TypeAlias = Cron | Every | At


def cron(expr: str, tz: str = "UTC", *, jitter: float | timedelta = 0) -> Cron:
    """A cron schedule in zone ``tz``; raises InvalidSchedule naming ``expr``/``tz``/``jitter``.

    Five fields (minute hour day-of-month month day-of-week) with lists, ranges, steps,
    month and day names and day-of-week 0-7 (0 and 7 are Sunday), the extensions ``L``
    (``L``: the month's last day; ``5L``: its last Friday), ``LW`` (its last weekday) and
    ``#`` (``MON#2``: its second Monday); or one of @yearly @annually @monthly @weekly
    @daily @midnight @hourly. The nearest weekday to a day, ``15W``, is not supported:
    ``cron("0 9 15W * *")`` raises InvalidSchedule ``expr '0 9 15W * *': '15W' (the
    weekday nearest a day) is not supported; 'LW' (the last weekday of the month) is``.
    """
    return Cron(expr, tz, jitter=jitter)


def every(
    interval: float | timedelta,
    *,
    anchor: datetime | None = None,
    jitter: float | timedelta = 0,
) -> Every:
    """An elapsed-time schedule: ``anchor + k * interval`` (default anchor: the Unix epoch).

    ``interval`` is a whole number of seconds, at least 1: an ``int``, a ``float`` with
    nothing after the point (``60.0``) or a ``timedelta`` of whole seconds. Each fire has
    its own second-precision key, so ``every(1.5)`` raises InvalidSchedule naming
    ``interval``. ``anchor`` must be aware; ``0 <= jitter < interval``. Anything else
    raises InvalidSchedule naming the field.
    """
    return Every(interval, anchor=anchor, jitter=jitter)


def at(when: datetime) -> At:
    """A schedule that fires once, at ``when`` (aware, any zone; rounded up to the second).

    A naive ``when`` raises InvalidSchedule naming ``when``. Combine any schedule with
    ``start_at`` / ``end_at`` / ``max_runs`` in its ``gaffer`` options to bound it.
    """
    return At(when)


_FIELDS = {
    "cron": ("expr", "tz", "jitter"),
    "every": ("interval", "anchor", "jitter"),
    "at": ("when", "tz"),
}
_REQUIRED = {"cron": "expr", "every": "interval", "at": "when"}


def schedule_from_dict(data: Mapping[str, Any]) -> Schedule:
    """The schedule a ``to_dict()`` describes; a bad dict raises InvalidSchedule naming the key."""
    if not isinstance(data, Mapping):
        raise InvalidSchedule(
            f"a schedule must be a dict, got {type(data).__name__}", field="schedule"
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise InvalidSchedule(f"kind must be 'cron', 'every' or 'at', got {kind!r}", field="kind")
    for key in data:
        if key != "kind" and key not in _FIELDS[kind]:
            raise InvalidSchedule(f"unknown key {key!r} for a {kind} schedule", field=str(key))
    required = _REQUIRED[kind]
    if required not in data:
        raise InvalidSchedule(f"a {kind} schedule needs {required!r}", field=required)
    jitter = data.get("jitter", 0)
    if kind == "cron":
        return Cron(data["expr"], data.get("tz", "UTC"), jitter=jitter)
    if kind == "at":
        when = _parse_anchor(data["when"], "when")
        if when is None:
            raise InvalidSchedule("an at schedule needs 'when'", field="when")
        return At(when, tz=data.get("tz"))
    return Every(data["interval"], anchor=_parse_anchor(data.get("anchor")), jitter=jitter)


def _parse_anchor(value: object, name: str = "anchor") -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            # Anything but an ISO string falls through to the error below; awareness is
            # checked by Every itself.
            return datetime.fromisoformat(text)
        except ValueError:
            pass
    raise InvalidSchedule(f"{name} must be an ISO 8601 datetime, got {value!r}", field=name)


def as_schedule(value: object) -> Schedule:
    """``value`` as a Gaffer schedule: a Gaffer schedule as is, seconds or a timedelta as
    ``every``.

    Celery's ``crontab`` and anything else raise InvalidSchedule naming ``schedule``.
    """
    if isinstance(value, (Cron, Every, At)):
        return value
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        return every(value)
    if isinstance(value, crontab):
        raise InvalidSchedule(
            f"{value!r} is a Celery crontab: use celery_gaffer.cron(...) instead; "
            "Celery's crontab has different DST behaviour",
            field="schedule",
        )
    raise InvalidSchedule(
        "schedule must be celery_gaffer.cron(...), every(...), at(...), a number of "
        f"seconds or a timedelta, got {type(value).__name__}: {value!r}",
        field="schedule",
    )
