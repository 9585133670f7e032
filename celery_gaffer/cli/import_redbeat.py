"""``gaffer import redbeat``: celery-redbeat's entries in Redis as schedules of source db."""

from __future__ import annotations

import click

from ..importers.redbeat import import_redbeat, key_prefix_of, read_redbeat, redis_url_of
from .base import actor_option, app_of, gaffer_errors, store_of
from .imports import import_, print_report
from .update import dry_run_option


@import_.command("redbeat")
@click.option(
    "--redis-url",
    default=None,
    help="The Redis redbeat keeps its schedule in (redis:// or rediss://; default: "
    "redbeat_redis_url, else broker_url).",
)
@click.option(
    "--key-prefix",
    default=None,
    help="redbeat_key_prefix (default: the app's, else 'redbeat:'); the schedule is the "
    "sorted set '<prefix>:schedule'.",
)
@dry_run_option
@actor_option
@click.pass_context
@gaffer_errors
def redbeat(
    ctx: click.Context,
    redis_url: str | None,
    key_prefix: str | None,
    dry_run: bool,
    actor: str | None,
) -> None:
    """Import redbeat's entries: crontab, interval and simple rrule mapped exactly.

    One line per entry: added, changed (which fields), unchanged, or cannot be mapped
    (with the reason), then a summary. Each new schedule starts from the entry's
    last_run_at. Running it twice changes nothing the second time. Redis is only read.
    Exit status 1 when some entries cannot be mapped (the others are imported).
    """
    app = app_of(ctx)
    url = redis_url_of(app, redis_url)
    prefix = key_prefix_of(app, key_prefix)
    source = read_redbeat(url, prefix)
    store = store_of(ctx, actor=actor)
    report = import_redbeat(store, source, prefix, dry_run=dry_run)
    print_report(ctx, report)
