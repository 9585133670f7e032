"""Which Redis database a test run may empty, and how it proves the database is its own.

A run given ``GAFFER_TEST_REDIS_URL`` was told which database is the tests' to empty. Without
it, the run claims one on 127.0.0.1:6379: in one atomic step it writes the owner key
``gaffer-test-owner`` (its run id, with a short expiry the run keeps refreshing) into the first
database of 1..15 that holds no key at all. A database holding anything else, a developer's
data or another run's claim, is never claimed and never emptied, so two runs at once get two
databases. Emptying keeps the owner key and first checks it still names this run; the end of
the session deletes everything in the claimed database; a crashed run's claim expires.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from celery_gaffer.settings import mask_url

OWNER_KEY = "gaffer-test-owner"
# Database 0 is where most applications keep their data: never claimed.
CLAIMABLE = range(1, 16)
CLAIM_SECONDS = 120
REFRESH_SECONDS = 20

# Claim the database if it holds no key at all; the owner key then is its only key.
_CLAIM = """
if redis.call('DBSIZE') ~= 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""

# ARGV[1]: this run's id, or '' for a database named explicitly (emptied unless another
# run claimed it). Everything but the owner key is deleted; the owner key keeps its expiry.
_EMPTY = """
local owner = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and owner ~= ARGV[1] then return redis.error_reply('not claimed by this run') end
if ARGV[1] == '' and owner then return redis.error_reply('claimed by another test run') end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('FLUSHDB')
if owner and ttl > 0 then redis.call('SET', KEYS[1], owner, 'PX', ttl)
elseif owner then redis.call('SET', KEYS[1], owner) end
return 1
"""

_REFRESH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('EXPIRE', KEYS[1], ARGV[2])
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('FLUSHDB')
return 1
"""


class ClaimError(RuntimeError):
    """A Redis database the tests may not empty, or none free to claim."""


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=10)


def with_database(server: str, number: int) -> str:
    """``server`` (``redis://host:port``) with database ``number``."""
    return f"{server.rstrip('/')}/{number}"


def empty(url: str, owner: str = "") -> None:
    """Delete every key of ``url``'s database but the owner key.

    ``owner`` is this run's id for a claimed database; ``''`` for one named explicitly,
    which is refused when another run claimed it. Raises :class:`ClaimError` when the
    database is not this run's to empty.
    """
    client = _client(url)
    try:
        client.register_script(_EMPTY)(keys=[OWNER_KEY], args=[owner])
    except redis.ResponseError as exc:
        raise ClaimError(f"Redis database {mask_url(url)} is {exc}; not emptied") from None
    finally:
        client.close()


@dataclass
class Claim:
    """A database this run claimed: refreshed in the background until released."""

    url: str
    owner: str
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def keep(self) -> None:
        """Refresh the owner key's expiry every few seconds until :meth:`release`."""
        self._thread = threading.Thread(
            target=self._refresh, name="gaffer-test-redis-claim", daemon=True
        )
        self._thread.start()

    def refresh(self) -> bool:
        """Push the claim's expiry back; False when the owner key no longer names this run."""
        client = _client(self.url)
        try:
            script = client.register_script(_REFRESH)
            return bool(script(keys=[OWNER_KEY], args=[self.owner, CLAIM_SECONDS]))
        finally:
            client.close()

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            try:
                if not self.refresh():
                    return
            except redis.RedisError:
                continue  # the next round tries again; emptying reports a lost claim

    def empty(self) -> None:
        """Delete every key but the owner key (:class:`ClaimError` if the claim was lost)."""
        empty(self.url, self.owner)

    def release(self) -> None:
        """Stop refreshing and delete everything in the database if it is still this run's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        client = _client(self.url)
        try:
            client.register_script(_RELEASE)(keys=[OWNER_KEY], args=[self.owner])
        finally:
            client.close()


def claim(server: str, numbers: Iterable[int] = CLAIMABLE, owner: str | None = None) -> Claim:
    """Claim the first database of ``numbers`` on ``server`` that holds no key.

    Raises :class:`ClaimError` when every one holds keys; ``redis.RedisError`` when the
    server does not answer.
    """
    owner = owner or uuid.uuid4().hex
    tried = list(numbers)
    for number in tried:
        url = with_database(server, number)
        client = _client(url)
        try:
            if client.register_script(_CLAIM)(keys=[OWNER_KEY], args=[owner, CLAIM_SECONDS]):
                return Claim(url=url, owner=owner)
        except redis.ResponseError:
            break  # a server configured with fewer databases: none further up either
        finally:
            client.close()
    span = f"{tried[0]}..{tried[-1]}" if tried else "(none)"
    raise ClaimError(
        f"no empty Redis database to claim among {span} on {server}; empty one or set "
        "GAFFER_TEST_REDIS_URL to a database the tests may empty"
    )
