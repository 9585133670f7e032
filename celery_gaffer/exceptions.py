"""The exceptions celery-gaffer raises.

Every one derives from ``GafferError``. Each class's docstring is its default
message; ``field`` names the offending input (a setting key, a schedule field) when
there is one. A driver's error is kept as ``__cause__``.
"""

from __future__ import annotations


class GafferError(Exception):
    """celery-gaffer refused or could not complete an operation."""

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        self.field = field
        text = message if message is not None else (self.__doc__ or "").strip()
        super().__init__(text)


class ConfigurationError(GafferError, ValueError):
    """A ``gaffer_*`` setting has a value celery-gaffer cannot use."""


class InvalidSchedule(GafferError, ValueError):
    """A schedule's expression, zone, interval, jitter or datetime argument is invalid."""


class InvalidInput(GafferError, ValueError):
    """A schedule row or task input was refused before anything was written."""


class ScheduleNotFound(GafferError, LookupError):
    """No schedule has that name."""


class ScheduleExists(GafferError):
    """A schedule with that name already exists (pass ``replace=True`` to overwrite)."""


class LeaseHeld(GafferError):
    """Another live holder has the lease."""

    def __init__(self, message: str | None = None, *, owner: str | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class FenceLost(GafferError):
    """The run's fence is no longer current: another holder took the lease."""


class AlreadyProcessed(GafferError):
    """The run's idempotency key was already completed by another run."""


class DatabaseUnavailable(GafferError):
    """The Gaffer database could not be reached."""


class DatabaseNotReady(GafferError):
    """The Gaffer database is missing, not migrated, or at a revision this version does
    not know: run ``celery -A <app> gaffer migrate``."""


class GafferConfigWarning(UserWarning):
    """A ``gaffer_*`` key celery-gaffer does not know (a typo): it is ignored. Issued with
    :func:`warnings.warn`, once per key and process."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line, for a handled condition's log line
    (no traceback: the condition was expected and dealt with). A driver's error is read
    from the exception SQLAlchemy wrapped it in."""
    orig = getattr(exc, "orig", None) or exc
    text = " ".join(str(orig).split())[:300]
    return f"{type(orig).__name__}: {text}" if text else type(orig).__name__
