"""The console's tokens, read once from ``app.conf`` when it starts.

- ``gaffer_web_token`` (else the environment's ``GAFFER_WEB_TOKEN``): one token that may
  act, named :data:`SHARED_NAME`;
- ``gaffer_web_tokens = {"alice": "...", "deploy-bot": "..."}``: named tokens that may act;
- ``gaffer_web_read_tokens = {"viewer": "..."}``: named tokens that may only read. With
  one of these configured, reading the console and its API needs a token too.

A token's name is the actor its actions are recorded under. Names are 1 to 100
characters without control characters, each used once; secrets are non-empty text, each
used once (a secret names its token). A bad value raises
:class:`~celery_gaffer.exceptions.ConfigurationError` naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigurationError

#: The name (actor) of the single ``gaffer_web_token``.
SHARED_NAME = "token"
#: The keys of the named tokens: those that may act, and those that may only read.
WRITE_KEY = "gaffer_web_tokens"
READ_KEY = "gaffer_web_read_tokens"
#: Longest token name.
NAME_LENGTH = 100


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its name (the actor), its secret (never shown) and what it may do."""

    name: str
    secret: str = field(repr=False)
    read_only: bool = False


def resolve_token(app: Any, token: str | None) -> str:
    """The single token: ``token`` when given, else ``app.conf.gaffer_web_token``, else
    the environment's ``GAFFER_WEB_TOKEN``; "" means none."""
    if token is not None:
        return token
    configured = app.conf.get("gaffer_web_token")
    if configured:
        return str(configured)
    return os.environ.get("GAFFER_WEB_TOKEN", "")


def configured_tokens(app: Any, token: str | None) -> tuple[Token, ...]:
    """Every token of the console of ``app`` (``token``: as :func:`resolve_token` takes
    it), validated."""
    tokens: list[Token] = []
    shared = resolve_token(app, token)
    if shared:
        tokens.append(Token(SHARED_NAME, shared))
    tokens.extend(_named(app.conf.get("gaffer_web_tokens"), WRITE_KEY, read_only=False))
    tokens.extend(_named(app.conf.get("gaffer_web_read_tokens"), READ_KEY, read_only=True))
    names: set[str] = set()
    secrets: set[str] = set()
    for found in tokens:
        key = READ_KEY if found.read_only else WRITE_KEY
        if found.name in names:
            raise ConfigurationError(
                f"{key}: the name {found.name!r} is used twice (the single gaffer_web_token "
                f"is named {SHARED_NAME!r})",
                field=key,
            )
        if found.secret in secrets:
            raise ConfigurationError(
                f"{key}: the token of {found.name!r} is also another name's token", field=key
            )
        names.add(found.name)
        secrets.add(found.secret)
    return tuple(tokens)


def _named(value: Any, key: str, *, read_only: bool) -> list[Token]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{key}: expected a dict of name to token, got {type(value).__name__}", field=key
        )
    tokens = []
    for name, secret in value.items():
        if (
            not isinstance(name, str)
            or not 1 <= len(name) <= NAME_LENGTH
            or not name.isprintable()
            or name != name.strip()
        ):
            raise ConfigurationError(
                f"{key}: a name is 1 to {NAME_LENGTH} printable characters without "
                f"leading or trailing spaces, got {name!r}",
                field=key,
            )
        if not isinstance(secret, str) or not secret:
            raise ConfigurationError(
                f"{key}: the token of {name!r} must be non-empty text", field=key
            )
        tokens.append(Token(name, secret, read_only))
    return tokens
