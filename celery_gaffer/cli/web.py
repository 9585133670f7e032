"""``celery -A proj gaffer web``: serve the console (schedules, runs, alerts, actions).

The console lives in :mod:`celery_gaffer.web`, which needs the ``web`` extra (Starlette,
Jinja2, uvicorn): it is imported here, when the command runs, never when the CLI loads.
The command binds its socket itself before serving, so a port in use is one line and exit
2 like any other failure, and the line it prints names the address that is really bound.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from types import ModuleType
from typing import Any

import click

from .base import app_of, fail, gaffer, gaffer_errors, ready

#: Hosts that only this machine can reach; any other host gets a warning.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: The top-level modules of the ``web`` extra (and what they import themselves).
EXTRA_MODULES = frozenset(
    {"starlette", "jinja2", "markupsafe", "uvicorn", "multipart", "python_multipart", "anyio"}
)
MISSING_EXTRA = "the web console needs the web extra: pip install 'celery-gaffer[web]'"


@gaffer.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; any other than 127.0.0.1, localhost or ::1 is reachable "
    "from the network.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=5557,
    show_default=True,
    help="Port to listen on (0: any free port, printed at start).",
)
@click.pass_context
@gaffer_errors
def web(ctx: click.Context, host: str, port: int) -> None:
    """Serve the web console: schedules, runs, alerts and their actions (needs the web
    extra: pip install 'celery-gaffer[web]').

    Read-only unless gaffer_web_token (or the environment variable GAFFER_WEB_TOKEN) is
    set; then every action needs that token. Stop it with Ctrl-C.
    """
    uvicorn, create_app = _console_modules()
    from ..web.tokens import configured_tokens, resolve_token

    database = ready(ctx)
    app = app_of(ctx)
    token = resolve_token(app, None)  # gaffer_web_token, else GAFFER_WEB_TOKEN
    # On loopback, only loopback names: a DNS-rebinding page gets 400, not the console.
    allowed = LOCAL_HOSTS | {host} if host in LOCAL_HOSTS else None
    asgi_app = create_app(app, token=token, allowed_hosts=allowed)
    listener = _listen(host, port)
    bound_port = int(listener.getsockname()[1])
    if host not in LOCAL_HOSTS:
        click.echo(
            f"warning: listening on {host}, the console is reachable from the network: "
            "anyone who reaches it sees every schedule (prefer an SSH tunnel to 127.0.0.1, "
            "or TLS in front of it)",
            err=True,
        )
    acting = [found for found in configured_tokens(app, token) if not found.read_only]
    access = "actions need the token" if acting else "read-only"
    click.echo(
        f"Gaffer console on {_url(host, bound_port)} ({access}); "
        f"database {database.settings.masked_url}"
    )
    config = uvicorn.Config(
        asgi_app,
        log_level="warning",
        access_log=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[listener])


def _console_modules() -> tuple[ModuleType, Callable[..., Any]]:
    try:
        # Starlette imports python-multipart only when the first form arrives: checked
        # here, so that a console without it never starts.
        import python_multipart  # noqa: F401
        import uvicorn

        from ..web import create_app
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in EXTRA_MODULES:
            fail(MISSING_EXTRA)
        raise
    return uvicorn, create_app


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6, as the host resolves)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        fail(f"--host: cannot resolve {host!r} ({exc.strerror})")
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        fail(f"cannot listen on {_url(host, port)}: {exc.strerror or exc}")
    return listener


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"
