"""Publishing fires to the broker: the one module that talks to it.

:func:`send` publishes fires with their deterministic task ids and says which reached
the broker and which payloads it refused; it writes nothing to the database (marking
the sent fires is the caller's: :mod:`.marking`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu.exceptions import OperationalError as BrokerError

from ..exceptions import one_line
from ..protocol import FireHeaders, Overlap, format_nominal
from ..schedules.codecs import codec_problem
from ..store.fires import Fire
from ..store.schedules import Payload
from ..traces import end_fire, fire_span, sending, tracer

logger = logging.getLogger("celery_gaffer.publisher")

# Fires sent per broker batch (kombu's ``Producer.batch``): one round trip each on Redis,
# and the most whose delivery one failed flush leaves uncertain.
PUBLISH_BATCH = 250
# Broker operations kombu may buffer in one publish batch before it flushes early: more
# than any batch of PUBLISH_BATCH messages takes (a queue with ``x-expires`` adds one
# operation per priority step to each message, and there are at most 256 steps), so each
# batch is flushed once, at its end; the first one only after its commit is known.
BATCH_OPERATIONS = PUBLISH_BATCH * 300


def fire_headers(fire: Fire, payload: Payload) -> dict[str, Any]:
    """The message headers of a fire (see :class:`~celery_gaffer.protocol.FireHeaders`).

    ``gaffer_overlap`` carries the schedule's overlap policy to the task when it is not
    ``allow``, and ``gaffer_ping`` its ping URL when it has one.
    """
    # Spelled out (one dict, no FireHeaders in between): one per fire sent, the hot path.
    # The key is "{schedule}@{nominal}", the nominal time already formatted as the header
    # writes it.
    key, cut = fire.key, len(fire.schedule)
    nominal = key[cut + 1 :] if key[cut : cut + 1] == "@" else format_nominal(fire.nominal_at)
    headers: dict[str, Any] = {
        _HEADER["schedule"]: fire.schedule,
        _HEADER["nominal_at"]: nominal,
        _HEADER["key"]: key,
    }
    if payload.overlap != Overlap.ALLOW:
        headers[_HEADER["overlap"]] = str(payload.overlap)
    headers[_HEADER["beat_task"]] = True
    if payload.ping_url is not None:
        headers[_HEADER["ping"]] = payload.ping_url
    return headers


#: Header name of each FireHeaders field.
_HEADER = dict(FireHeaders.NAMES)


#: Errors of the broker or the network, after which a send is retried; any other error
#: of a send is the fire's payload's own (its schedule goes to ``error``).
BROKER_ERRORS = (BrokerError, ConnectionError, TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class Published:
    """What :func:`send` did: the fires sent, and the schedules whose payload could not
    be sent at all, with the reason (not a broker error: sending again cannot help)."""

    sent: list[Fire] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def send(
    app: Any,
    fires: Sequence[Fire],
    payloads: dict[str, Payload],
    producer: Any,
    *,
    wait_for_commit: Callable[[], None] | None = None,
) -> Published:
    """Send each fire with its deterministic task id through ``producer``.

    Sends go in kombu's publish batches where the transport has them (Redis: one round
    trip per :data:`PUBLISH_BATCH` messages). A fire whose send fails, or whose batch's
    flush fails (its delivery is then uncertain), is not in :attr:`Published.sent`: it
    stays ``pending`` and is published again by any Beat after
    ``gaffer_republish_after``; the ledger records the repeat as a republish and the
    task's idempotency key makes it harmless.

    ``wait_for_commit``: waits for the commit of the transaction that recorded
    ``fires`` (and raises if it failed). It is called once, before any message can reach
    the broker: after the first batch's messages are built, before that batch is
    flushed (if it raises, the batch is discarded and the error raised); first, where
    the producer would publish each message at once.
    """
    outcome = Published()
    defaults = message_defaults(app)
    traced = tracer()  # None without OpenTelemetry: found once a process
    for start in range(0, len(fires), PUBLISH_BATCH):
        part = fires[start : start + PUBLISH_BATCH]
        outcome.sent.extend(
            _send_batch(
                app, part, payloads, producer, outcome.refused, defaults, wait_for_commit, traced
            )
        )
        wait_for_commit = None
    if wait_for_commit is not None:
        wait_for_commit()
    return outcome


def message_defaults(app: Any) -> Callable[[Payload], dict[str, Any]]:
    """The message fields Celery computes for every message it sends, computed once a
    payload's arguments (not once a fire): a payload's ``argsrepr`` and ``kwargsrepr``
    (Celery's ``saferepr``, with the app's limits) and the ``origin`` header.

    Celery would compute the same values for each message (``send_task`` takes them as
    options, the way a task hides its arguments from Flower). Computed once a send for
    each payload's arguments (schedules with the same entry share one list), they take
    about a fifth off what publishing a fire costs Beat. Options a schedule sets itself
    win.
    """
    amqp = app.amqp
    maxlevels = app.conf.get("task_repr_maxlevels")  # Celery >= 5.5; 5.4: saferepr's own
    depth: dict[str, Any] = {} if maxlevels is None else {"maxlevels": maxlevels}
    origin = anon_nodename()
    # By the identity of the arguments' objects, kept alive here so that no id is reused.
    known: dict[tuple[int, int], tuple[Any, Any, dict[str, Any]]] = {}

    def defaults(payload: Payload) -> dict[str, Any]:
        args, kwargs = payload.args, payload.kwargs
        key = (id(args), id(kwargs))
        seen = known.get(key)
        if seen is None:
            fields = {
                "argsrepr": saferepr(args or (), amqp.argsrepr_maxsize, **depth),
                "kwargsrepr": saferepr(kwargs or {}, amqp.kwargsrepr_maxsize, **depth),
                "origin": origin,
            }
            seen = known[key] = (args, kwargs, fields)
        return seen[2]

    return defaults


def _send_batch(
    app: Any,
    fires: Sequence[Fire],
    payloads: dict[str, Payload],
    producer: Any,
    refused: dict[str, str],
    defaults: Callable[[Payload], dict[str, Any]],
    wait_for_commit: Callable[[], None] | None = None,
    traced: Any = None,
) -> list[Fire]:
    """Send ``fires``; return those that reached the broker (as far as it said).
    ``wait_for_commit``: see :func:`send`; ``traced``: the tracer of the fires' spans."""
    batch = getattr(producer, "batch", None)  # kombu >= 5.7
    if wait_for_commit is not None and (batch is None or not _buffers(producer)):
        wait_for_commit()  # each message would go out as it is sent
        wait_for_commit = None
    sent: list[Fire] = []
    try:
        with (
            batch(max_size=BATCH_OPERATIONS) if batch is not None else nullcontext(),
            declared_once(producer),
        ):
            for fire in fires:
                if fire.schedule in refused:
                    continue
                problem = _send(app, fire, payloads[fire.schedule], producer, defaults, traced)
                if problem is None:
                    sent.append(fire)
                elif problem:
                    refused[fire.schedule] = problem
            if wait_for_commit is not None:
                wait_for_commit()  # raising, the batch is discarded: nothing reaches the broker
                wait_for_commit = None
    except Exception as exc:  # the flush failed: every send is uncertain
        if wait_for_commit is not None:
            raise  # not flushed: the fires' own transaction failed (or the wait for it)
        # kombu's BatchPublishError says only that a flush failed; the cause says why.
        cause = exc.__cause__
        because = f" ({one_line(cause)})" if isinstance(cause, Exception) else ""
        logger.error(
            "could not publish %d fires (%s: %s%s); they stay pending and will be republished",
            len(sent),
            type(exc).__name__,
            str(exc).splitlines()[0][:300] if str(exc) else "",
            because,
            extra={"action": "publish_failed", "count": len(sent)},
        )
        return []
    if not logger.isEnabledFor(logging.INFO):
        return sent
    for fire in sent:
        logger.info(
            "sent %s (%s) task id %s",
            fire.key,
            payloads[fire.schedule].task,
            fire.task_id,
            extra={
                "action": "fire_republished" if fire.publish_count > 1 else "fire_sent",
                "key": fire.key,
                "schedule": fire.schedule,
                "task_id": fire.task_id,
            },
        )
    return sent


def _buffers(producer: Any) -> bool:
    """Whether a publish batch of ``producer`` holds its messages until it is flushed:
    kombu publishes at once on a transport without batches (its channel says)."""
    try:
        channel = producer.channel
    except Exception:  # noqa: BLE001 - not connected: the sends will say why
        return False
    return getattr(channel, "create_publish_batch", None) is not None and bool(
        getattr(channel, "supports_batch_publish", True)
    )


class DeclaresOnceABatch:
    """A producer class's mixin: inside :func:`declared_once`, each queue (or exchange)
    goes to kombu's ``maybe_declare`` once per channel, not once per message.

    Celery asks the producer to declare the message's queue with every message, and
    kombu copies the queue, binds the copy to the channel and hashes it to find it in
    its cache each time: a fifth of what publishing a message costs. Inside, a queue
    this producer already passed on on the same channel is not passed again (kombu has
    just declared it, or found it declared). The first message of each batch, and the
    first after a reconnect (a new channel), still go through kombu. A declaration that
    raised is not remembered.
    """

    #: (id of the channel, id of the entity) -> both, kept so that neither id is reused
    #: while inside (a reconnect's new channel cannot take the old one's); None outside.
    gaffer_declared: dict[tuple[int, int], tuple[Any, Any]] | None = None

    def maybe_declare(self, entity: Any, retry: bool = False, **retry_policy: Any) -> Any:
        seen = self.gaffer_declared
        declare = super().maybe_declare  # type: ignore[misc]
        if seen is None:
            return declare(entity, retry, **retry_policy)
        channel = self.channel  # type: ignore[attr-defined]
        key = (id(channel), id(entity))
        if key in seen:
            return False
        declared = declare(entity, retry, **retry_policy)
        seen[key] = (channel, entity)
        return declared


def declaring_once_a_batch(producer_class: type[Any]) -> type[Any]:
    """``producer_class`` (kombu's ``Producer`` or a subclass, as Celery's Beat makes its
    producer from) with :class:`DeclaresOnceABatch` mixed in."""
    if issubclass(producer_class, DeclaresOnceABatch):
        return producer_class
    return type(producer_class.__name__, (DeclaresOnceABatch, producer_class), {})


@contextmanager
def declared_once(producer: Any) -> Iterator[None]:
    """While inside, a :class:`DeclaresOnceABatch` ``producer`` passes each queue to
    kombu once per channel (any other producer: as it is)."""
    if not isinstance(producer, DeclaresOnceABatch) or producer.gaffer_declared is not None:
        yield
        return
    producer.gaffer_declared = {}
    try:
        yield
    finally:
        producer.gaffer_declared = None


def _transient_errors(producer: Any) -> tuple[type[BaseException], ...]:
    """Errors after which a send is retried: :data:`BROKER_ERRORS`, and the connection
    and channel errors of the producer's transport (a Redis ``ResponseError`` during a
    failover, say), which kombu does not always wrap."""
    connection = getattr(producer, "connection", None)
    extra = (
        *getattr(connection, "connection_errors", ()),
        *getattr(connection, "channel_errors", ()),
    )
    return (*BROKER_ERRORS, *(e for e in extra if isinstance(e, type)))


def _unsendable(payload: Payload, exc: BaseException) -> str | None:
    """Why a send that failed with what looks like a broker error will fail the same way
    every time, if it will.

    kombu's Redis transport counts a ``KeyError`` as a connection error (for its
    consumer's poller), so kombu reports a lookup that failed while the message was being
    built, such as a compression its registry does not know, as a lost connection. A send
    only publishes: a bare ``KeyError`` under it comes from the message, not the broker.
    """
    for option in ("serializer", "compression"):
        if option in payload.options:
            problem = codec_problem(option, payload.options[option])
            if problem is not None:
                return f"{problem}: the fire cannot be sent"
    origin = exc.__cause__ if isinstance(exc, BrokerError) else exc
    if type(origin) is KeyError:
        return f"options: the fire cannot be sent (KeyError: {origin})"[:500]
    return None


def _send(
    app: Any,
    fire: Fire,
    payload: Payload,
    producer: Any,
    defaults: Callable[[Payload], dict[str, Any]],
    traced: Any = None,
) -> str | None:
    """Send one fire: None when sent, "" after a broker error (it stays pending and is
    published again), else why its payload cannot be sent at all.

    ``traced``: a tracer (:mod:`celery_gaffer.traces`): the send is the fire's span, whose
    context the message's headers carry."""
    options = {**defaults(payload), **payload.options}
    headers = {**(options.pop("headers", None) or {}), **fire_headers(fire, payload)}
    span = None
    if traced is not None:
        span = fire_span(
            traced,
            fire.schedule,
            headers[_HEADER["nominal_at"]],
            fire.key,
            headers,
            nominal_ts=fire.nominal_at.timestamp(),
            jitter=payload.jitter,
            catchup=payload.catchup,
            kind=fire.kind,
            publish_count=fire.publish_count,
        )
    if span is None:
        return _publish(app, fire, payload, producer, options, headers)
    problem: str | None = "unexpected error"
    try:
        with sending(span):
            problem = _publish(app, fire, payload, producer, options, headers)
    finally:
        end_fire(span, problem)
    return problem


def _publish(
    app: Any,
    fire: Fire,
    payload: Payload,
    producer: Any,
    options: dict[str, Any],
    headers: dict[str, Any],
) -> str | None:
    """Publish one fire's message (see :func:`_send`)."""
    try:
        app.send_task(
            payload.task,
            args=payload.args,
            kwargs=payload.kwargs,
            task_id=fire.task_id,
            producer=producer,
            headers=headers,
            **options,
        )
    except _transient_errors(producer) as exc:
        problem = _unsendable(payload, exc)
        if problem is not None:
            return problem
        logger.warning(
            "could not publish fire %s (%s: %s); it stays pending and will be republished",
            fire.key,
            type(exc).__name__,
            str(exc).splitlines()[0][:300] if str(exc) else "",
            extra={"action": "publish_failed", "key": fire.key, "schedule": fire.schedule},
        )
        return ""
    except Exception as exc:  # noqa: BLE001 - the payload's own fault: isolate its schedule
        reason = _unsendable(payload, exc) or (
            f"options: the fire cannot be sent ({type(exc).__name__}: {exc})"
        )
        return reason.splitlines()[0][:500]
    return None
