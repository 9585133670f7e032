"""The ``gaffer_*`` keys of ``app.conf``, read once into a frozen, validated object."""

from __future__ import annotations

import difflib
import math
import re
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .django_database import django_alias, django_database_url
from .exceptions import ConfigurationError, GafferConfigWarning
from .runtime import runtime
from .traces import TRACE_URL_KEY, trace_url_setting

DEFAULT_DATABASE_URL = "sqlite:///gaffer.sqlite3"
_PREFIX_RE = re.compile(r"^[a-z_][a-z0-9_]{0,29}$")
_SUPPORTED_BACKENDS = ("sqlite", "postgresql")
# Names accepted for PostgreSQL that all mean "psycopg 3", the one driver we ship.
# ``postgres://`` is how Heroku, Render and many ``.env`` files write it.
_POSTGRES_ALIASES = ("postgres", "postgresql", "postgres+psycopg", "postgresql+psycopg")
# The webhook URL's key, and a second name for it that ``celery report`` hides (Celery
# censors the settings whose names contain SECRET, TOKEN, KEY, PASS...).
WEBHOOK_URL_KEY = "gaffer_alert_webhook_url"
WEBHOOK_SECRET_URL_KEY = "gaffer_alert_webhook_secret_url"
#: Every key celery-gaffer reads from ``app.conf`` (``gaffer_web_token``,
#: ``gaffer_web_tokens`` and ``gaffer_web_read_tokens`` only the web console reads): any
#: other ``gaffer_*`` key is reported as unknown.
SETTING_KEYS: tuple[str, ...] = (
    "gaffer_database_url",
    "gaffer_table_prefix",
    "gaffer_lease_ttl",
    "gaffer_republish_after",
    "gaffer_max_catchup",
    "gaffer_alert_after_failures",
    "gaffer_default_grace",
    "gaffer_metrics_port",
    "gaffer_web_token",
    "gaffer_web_tokens",
    "gaffer_web_read_tokens",
    "gaffer_confirm_delivery_after",
    "gaffer_run_retention",
    "gaffer_ledger_retention",
    "gaffer_key_retention",
    "gaffer_partition_interval",
    "gaffer_run_arguments",
    WEBHOOK_URL_KEY,
    WEBHOOK_SECRET_URL_KEY,
    TRACE_URL_KEY,
)


#: The Django settings of the Django app (celery_gaffer.contrib.django): not ``app.conf``
#: keys, but visible to Celery when it reads the Django settings.
DJANGO_APP_SETTINGS = ("GAFFER_CELERY_APP", "GAFFER_MIGRATE_WITH_DJANGO")


@dataclass(frozen=True, slots=True)
class GafferSettings:
    """Validated configuration. Build it with :func:`settings_for` or :meth:`from_conf`."""

    database_url: URL
    table_prefix: str = "gaffer_"
    lease_ttl: float = 60.0
    republish_after: float = 30.0
    max_catchup: int = 100
    alert_after_failures: int = 3
    metrics_port: int | None = None
    default_grace: float = 60.0
    confirm_delivery_after: float | None = None
    run_retention: float = 30 * 86400.0
    ledger_retention: float = 30 * 86400.0
    key_retention: float = 30 * 86400.0
    #: The period of one partition of the ledger and the run records (PostgreSQL).
    partition_interval: float = 7 * 86400.0
    alert_webhook_url: str | None = None
    #: Whether run records keep each delivery's ``args`` and ``kwargs``.
    run_arguments: bool = True
    #: The console's link to a run's trace, with ``{trace_id}`` in it (None: no link).
    trace_url: str | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> GafferSettings:
        """Read and validate every ``gaffer_*`` key; raise :class:`ConfigurationError`.

        A ``gaffer_*`` key that is none of :data:`SETTING_KEYS` (a typo) is reported
        first, as one :class:`~celery_gaffer.exceptions.GafferConfigWarning` per key and
        process (see :func:`warn_unknown_keys`).
        """
        warn_unknown_keys(conf)
        return cls(
            database_url=parse_database_url(
                conf.get("gaffer_database_url") or DEFAULT_DATABASE_URL, "gaffer_database_url"
            ),
            table_prefix=_prefix(conf.get("gaffer_table_prefix", "gaffer_")),
            lease_ttl=_seconds(conf, "gaffer_lease_ttl", 60.0, minimum=1.0),
            republish_after=_seconds(conf, "gaffer_republish_after", 30.0, minimum=1.0),
            max_catchup=_count(conf, "gaffer_max_catchup", 100),
            alert_after_failures=_count(conf, "gaffer_alert_after_failures", 3),
            metrics_port=_port(conf.get("gaffer_metrics_port")),
            default_grace=_seconds(conf, "gaffer_default_grace", 60.0, minimum=0.0),
            confirm_delivery_after=_optional_seconds(conf, "gaffer_confirm_delivery_after"),
            run_retention=_seconds(conf, "gaffer_run_retention", 30 * 86400.0, minimum=60.0),
            ledger_retention=_seconds(conf, "gaffer_ledger_retention", 30 * 86400.0, minimum=60.0),
            key_retention=_seconds(conf, "gaffer_key_retention", 30 * 86400.0, minimum=60.0),
            partition_interval=_seconds(
                conf, "gaffer_partition_interval", 7 * 86400.0, minimum=3600.0
            ),
            alert_webhook_url=_webhook_setting(conf),
            run_arguments=_flag(conf, "gaffer_run_arguments", True),
            trace_url=trace_url_setting(conf.get(TRACE_URL_KEY)),
        )

    @property
    def masked_url(self) -> str:
        """The database URL with its password replaced by ``***``: safe to log or print."""
        return mask_url(self.database_url)

    @property
    def masked_alert_webhook_url(self) -> str | None:
        """The alert webhook URL as ``scheme://host/***``: safe to log (a webhook's user,
        path and query are its secret, as in Slack's URLs)."""
        return None if self.alert_webhook_url is None else masked_ping_url(self.alert_webhook_url)


def _flag(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    value = conf.get(key, default)
    if not isinstance(value, bool):
        raise ConfigurationError(f"{key}: expected True or False, got {value!r}", field=key)
    return value


_cache: weakref.WeakKeyDictionary[Any, GafferSettings] = weakref.WeakKeyDictionary()


def settings_for(app: Any) -> GafferSettings:
    """The settings of a Celery app, read from ``app.conf`` on first use and then cached."""
    settings = _cache.get(app)
    if settings is None:
        settings = GafferSettings.from_conf(app.conf)
        _cache[app] = settings
    return settings


def forget_settings(app: Any) -> None:
    """Drop the cached settings of ``app`` (tests that change ``app.conf`` call this)."""
    _cache.pop(app, None)


class WarnedKeys(set[str]):
    """The unknown ``gaffer_*`` keys this process already warned about."""


def warn_unknown_keys(conf: Mapping[str, Any]) -> None:
    """Warn once per process about each ``gaffer_*`` key of ``conf`` that celery-gaffer
    does not read, naming the closest known key: ``unknown setting gaffer_lease_tll (did
    you mean gaffer_lease_ttl?)``.

    Keys are matched as Celery looks them up: as written, or under the app's namespace
    (``config_from_object(..., namespace="CELERY")`` reads ``CELERY_GAFFER_LEASE_TTL``
    for ``gaffer_lease_ttl``). Any case of ``gaffer_`` counts, as Celery would ignore an
    upper-case ``GAFFER_LEASE_TTL`` silently.
    """
    finalize = getattr(conf, "finalize", None)
    if callable(finalize):  # Celery's Settings: load the configuration, namespace included
        finalize()
    warned = runtime().part("warned_setting_keys", WarnedKeys)
    namespace = getattr(conf, "prefix", None) or ""
    readable = {*SETTING_KEYS, *DJANGO_APP_SETTINGS}
    if namespace:
        readable.update(_in_case(namespace + key, namespace) for key in SETTING_KEYS)
    for key in list(conf):
        if not isinstance(key, str) or key in readable or key in warned:
            continue
        name = key.lower()
        written_in_namespace = bool(namespace) and name.startswith(namespace.lower())
        if written_in_namespace:
            name = name[len(namespace) :]
        if not name.startswith("gaffer_"):
            continue
        warned.add(key)
        # Compared without the shared ``gaffer_``, which would make every key look close.
        close = difflib.get_close_matches(name[7:], [known[7:] for known in SETTING_KEYS], n=1)
        if close:
            meant = "gaffer_" + close[0]
            if written_in_namespace or (namespace and key.isupper()):
                meant = _in_case(namespace + meant, namespace)
            message = f"unknown setting {key} (did you mean {meant}?)"
        else:
            message = f"unknown setting {key}: celery-gaffer has no such setting"
        # Located at "app.conf" (no line): the typo is in the configuration, not in the
        # code that happened to read it first, and the warning stays one line.
        warnings.warn_explicit(
            GafferConfigWarning(message),
            GafferConfigWarning,
            filename="app.conf",
            lineno=0,
            module=__name__,
        )


def _in_case(key: str, namespace: str) -> str:
    """``key`` as Celery spells a namespaced key: upper case under an upper-case namespace."""
    return key.upper() if namespace.isupper() else key.lower()


def parse_database_url(value: Any, key: str = "gaffer_database_url") -> URL:
    """Parse a SQLAlchemy URL for SQLite or PostgreSQL (psycopg 3) or raise naming ``key``.

    ``postgres://`` and ``postgresql://`` mean ``postgresql+psycopg://``; ``django://<alias>``
    means the database of ``DATABASES[alias]`` in the Django settings.
    """
    alias = django_alias(value)
    if alias is not None:
        value = django_database_url(alias, key)
    if isinstance(value, URL):
        url = value
    elif isinstance(value, str) and value.strip():
        if _ambiguous_at(value.strip()):
            raise ConfigurationError(
                f"{key}: {_masked_text(value)!r} has more than one '@' before its host: "
                "write an '@' in the user name or password as %40",
                field=key,
            )
        try:
            url = make_url(value.strip())
        except (ArgumentError, ValueError) as exc:
            raise ConfigurationError(
                f"{key}: cannot parse {_masked_text(value)!r} as a database URL; write it as "
                "postgresql://user:password@host/db or sqlite:///path",
                field=key,
            ) from exc
    else:
        raise ConfigurationError(f"{key}: expected a database URL string, got {value!r}", field=key)
    if url.drivername in _POSTGRES_ALIASES:
        url = url.set(drivername="postgresql+psycopg")
    elif url.drivername.startswith("postgres+"):  # named by its driver in the error below
        url = url.set(drivername="postgresql+" + url.drivername.partition("+")[2])
    backend = url.get_backend_name()
    if backend not in _SUPPORTED_BACKENDS:
        raise ConfigurationError(
            f"{key}: unsupported database {backend!r} in {mask_url(url)}; "
            "use sqlite:///path or postgresql+psycopg://user@host/db",
            field=key,
        )
    if backend == "postgresql":
        if url.drivername != "postgresql+psycopg":
            raise ConfigurationError(
                f"{key}: driver {url.drivername!r} is not supported; use postgresql+psycopg://",
                field=key,
            )
    elif url.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise ConfigurationError(f"{key}: use sqlite:///path for SQLite", field=key)
    return url


# Query parameters that hold a secret (libpq's ``password``, ``sslpassword``, tokens...).
_SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|key|auth|credential", re.IGNORECASE)


def mask_url(url: URL | str) -> str:
    """Render a database URL with every secret masked: the password of its user-info and
    any query parameter that looks like one (``password``, ``sslpassword``, ``token``...).
    Text that does not parse as a URL is masked as text."""
    if isinstance(url, str):
        if _ambiguous_at(url):
            return _masked_text(str(url))
        try:
            url = make_url(url)
        except (ArgumentError, ValueError):
            return _masked_text(str(url))
    query = {
        name: "***" if _SECRET_PARAMETER.search(name) else value
        for name, value in url.query.items()
    }
    rendered = url.set(query=query).render_as_string(hide_password=True)
    return rendered.replace("%2A%2A%2A", "***")


def masked_ping_url(url: str) -> str:
    """``url`` as ``scheme://host[:port]/***``: its user-info, path and query hidden (a
    ping or webhook URL's path is its secret); ``***`` when it does not parse."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number, a broken IPv6 host
        return "***"
    return f"{parts.scheme}://{host}{port}/***"


def _ambiguous_at(text: str) -> bool:
    """Whether a URL's text has more than one ``@`` before its path or query: an
    unescaped ``@`` in the password, which a parser would take for the host's start."""
    rest = text.partition("://")[2]
    return rest.partition("/")[0].count("@") > 1 or rest.partition("?")[0].count("@") > 1


# A URL's scheme and the slashes after it, however many a typo left (``postgresql:/``).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/*")


def _masked_text(text: str) -> str:
    """Mask what may be secret in a string that does not parse as a URL: everything
    after ``user:`` up to the last ``@`` (a password may hold an unescaped ``@``; a
    mistyped ``postgresql:/user:PW@host`` too), and query parameters that look secret.
    Over-masking is the safe side."""
    text = str(text)
    if "@" in text:
        scheme = _SCHEME.match(text)
        head = scheme.group(0) if scheme else ""
        userinfo, _, after = text[len(head) :].rpartition("@")
        user, colon, _secret = userinfo.partition(":")
        # No colon in the user-info: what precedes the '@' may be the password itself
        # (``user:PW@host`` read ``user:`` as the scheme).
        userinfo = f"{user}:***" if colon else "***"
        text = f"{head}{userinfo}@{after}"
    return re.sub(
        r"([?&][^=&]*(?:pass|pwd|secret|token|key|auth|credential)[^=&]*=)[^&]*",
        r"\1***",
        text,
        flags=re.IGNORECASE,
    )


def table_prefix_of(conf: Mapping[str, Any]) -> str:
    """``gaffer_table_prefix`` of ``conf``, validated, read without the other settings
    (without resolving a ``django://`` URL before Django's test runner renames its
    databases)."""
    return _prefix(conf.get("gaffer_table_prefix", "gaffer_"))


def _prefix(value: Any) -> str:
    if not isinstance(value, str) or not _PREFIX_RE.match(value):
        raise ConfigurationError(
            f"gaffer_table_prefix: {value!r} must be 1-30 lowercase letters, digits or "
            "underscores, not starting with a digit",
            field="gaffer_table_prefix",
        )
    if value.startswith("sqlite_"):
        raise ConfigurationError(
            f"gaffer_table_prefix: {value!r}: names starting with 'sqlite_' are SQLite's own",
            field="gaffer_table_prefix",
        )
    return value


def _seconds(conf: Mapping[str, Any], key: str, default: float, *, minimum: float) -> float:
    value = conf.get(key)
    if value is None:
        return default
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{key}: expected seconds, got {value!r}", field=key)
    if value < minimum:
        raise ConfigurationError(f"{key}: must be at least {minimum:g} s, got {value!r}", field=key)
    return float(value)


def _optional_seconds(conf: Mapping[str, Any], key: str) -> float | None:
    if conf.get(key) is None:
        return None
    return _seconds(conf, key, 0.0, minimum=1.0)


def _count(conf: Mapping[str, Any], key: str, default: int) -> int:
    value = conf.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{key}: expected a whole number >= 1, got {value!r}", field=key)
    return value


def _port(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ConfigurationError(
            f"gaffer_metrics_port: expected a TCP port 1-65535, got {value!r}",
            field="gaffer_metrics_port",
        )
    return value


def _webhook_setting(conf: Mapping[str, Any]) -> str | None:
    """The webhook URL, from whichever of its two keys is set (not both)."""
    plain, secret = conf.get(WEBHOOK_URL_KEY), conf.get(WEBHOOK_SECRET_URL_KEY)
    if plain is not None and secret is not None:
        raise ConfigurationError(
            f"{WEBHOOK_SECRET_URL_KEY}: set it or {WEBHOOK_URL_KEY}, not both",
            field=WEBHOOK_SECRET_URL_KEY,
        )
    if secret is not None:
        return _webhook_url(secret, WEBHOOK_SECRET_URL_KEY)
    return _webhook_url(plain, WEBHOOK_URL_KEY)


def _webhook_url(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        shown = "a blank string" if isinstance(value, str) else type(value).__name__
        raise ConfigurationError(f"{key}: expected an http(s) URL string, got {shown}", field=key)
    text = value.strip()
    # A webhook's path is its secret (Slack's, say): an error shows the URL as
    # scheme://host/*** at most.
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigurationError(
            f"{key}: cannot parse {masked_ping_url(text)!r} as a URL", field=key
        ) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"{key}: {masked_ping_url(text)!r} is not an http:// or https:// URL with a host",
            field=key,
        )
    return text
