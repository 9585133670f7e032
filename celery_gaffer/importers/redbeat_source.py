"""Reading celery-redbeat's schedule out of Redis, for :mod:`.redbeat`.

RedBeat keeps a sorted set ``<prefix>:schedule`` of entry keys (``<prefix><name>``), each a
hash with a ``definition`` and a ``meta`` field. Everything is read as bytes and returned
as stored: a member that is not UTF-8, is not a hash or holds a binary value is one
entry's problem, reported by the importer for that entry alone; only a Redis that cannot
be read at all fails the import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

from ..exceptions import GafferError, InvalidInput
from ..settings import mask_url

#: redbeat's default ``redbeat_key_prefix``.
DEFAULT_PREFIX = "redbeat:"
_SCHEMES = ("redis://", "rediss://")
_CONNECT_TIMEOUT = 5.0


class RedbeatUnavailable(GafferError):
    """The Redis that holds redbeat's schedule could not be read."""


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One member of redbeat's schedule set: its key and the hash's two fields, as stored.

    ``problem``: why the member could not be read as a hash (then both fields are None).
    """

    key: bytes
    definition: bytes | None
    meta: bytes | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class RedbeatSchedule:
    """What was read: the schedule set's key and its entries, in due order."""

    schedule_key: str
    entries: list[RawEntry]


def redis_url_of(app: Any, given: str | None) -> str:
    """``given``, else ``redbeat_redis_url``, else ``broker_url``: a redis:// or rediss:// URL."""
    url = given or app.conf.get("redbeat_redis_url") or app.conf.broker_url
    if not url:
        raise InvalidInput(
            "redis_url: no Redis URL: pass --redis-url or set redbeat_redis_url",
            field="redis_url",
        )
    if not str(url).startswith(_SCHEMES):
        raise InvalidInput(
            f"redis_url: {mask_url(str(url))} is not a redis:// or rediss:// URL (redbeat's "
            "sentinel and cluster URLs are not read: pass --redis-url of the master)",
            field="redis_url",
        )
    return str(url)


def key_prefix_of(app: Any, given: str | None) -> str:
    """``given``, else ``redbeat_key_prefix``, else ``redbeat:`` (as redbeat reads it)."""
    prefix = given if given is not None else app.conf.get("redbeat_key_prefix")
    prefix = prefix or DEFAULT_PREFIX
    if not isinstance(prefix, str):
        raise InvalidInput(f"key_prefix: expected text, got {prefix!r}", field="key_prefix")
    return prefix


def read_redbeat(url: str, prefix: str) -> RedbeatSchedule:
    """Every entry of redbeat's schedule set ``<prefix>:schedule`` (keys as redbeat builds
    them: ``redbeat`` and ``redbeat:`` are different sets, ``redbeat:schedule`` and
    ``redbeat::schedule``; when only the other one exists, the error says so)."""
    schedule_key = prefix + ":schedule"
    client = redis.Redis.from_url(
        url,
        decode_responses=False,
        socket_connect_timeout=_CONNECT_TIMEOUT,
        socket_timeout=_CONNECT_TIMEOUT,
    )
    try:
        kind = _type_name(client.type(schedule_key))
        if kind == "none":
            _check_other_spelling(client, prefix)
        elif kind != "zset":
            raise InvalidInput(
                f"key_prefix: {schedule_key!r} is a Redis {kind}, not redbeat's sorted set",
                field="key_prefix",
            )
        keys = [key for key in client.zrange(schedule_key, 0, -1) if isinstance(key, bytes)]
        entries = _entries(client, keys)
    except redis.RedisError as exc:
        raise RedbeatUnavailable(
            f"redis_url: cannot read redbeat's schedule at {mask_url(url)}: "
            f"{type(exc).__name__}: {_masked_reason(exc, url)}",
            field="redis_url",
        ) from exc
    finally:
        client.close()
    return RedbeatSchedule(schedule_key, entries)


def _entries(client: redis.Redis, keys: list[bytes]) -> list[RawEntry]:
    """Each key's two fields; a key whose ``HGET`` is refused (not a hash) gets a problem
    naming its type instead of failing the read."""
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hget(key, "definition")
            pipe.hget(key, "meta")
        fields = pipe.execute(raise_on_error=False)
    entries = []
    for i, key in enumerate(keys):
        definition, meta = fields[2 * i], fields[2 * i + 1]
        if isinstance(definition, redis.ResponseError) or isinstance(meta, redis.ResponseError):
            kind = _type_name(client.type(key))
            problem = f"key: the member is a Redis {kind}, not redbeat's hash"
            entries.append(RawEntry(key, None, None, problem))
        else:
            entries.append(RawEntry(key, _bytes(definition), _bytes(meta)))
    return entries


def _check_other_spelling(client: redis.Redis, prefix: str) -> None:
    other = prefix[:-1] if prefix.endswith(":") else prefix + ":"
    if other and client.exists(other + ":schedule"):
        raise InvalidInput(
            f"key_prefix: no redbeat schedule {prefix + ':schedule'!r}, but "
            f"{other + ':schedule'!r} exists: pass --key-prefix {other!r} (redbeat appends "
            "':schedule' to the prefix as given)",
            field="key_prefix",
        )


def _type_name(value: Any) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, (bytes, bytearray)) else None


def _masked_reason(exc: Exception, url: str) -> str:
    text = " ".join(str(exc).split())
    password = urlsplit(url).password
    if password:
        text = text.replace(password, "***")
    return text


__all__ = [
    "DEFAULT_PREFIX",
    "RawEntry",
    "RedbeatSchedule",
    "RedbeatUnavailable",
    "key_prefix_of",
    "read_redbeat",
    "redis_url_of",
]
