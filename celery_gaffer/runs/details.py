"""What a run record keeps of a delivery's arguments and of its failure, bounded in size.

Pure: no I/O. A run record never fails over these, whatever the task was given:

- ``args`` and ``kwargs`` are kept as they were given when their JSON text is at most
  :data:`ARGUMENTS_LIMIT` characters; a longer text is kept as
  ``{"truncated": true, "preview": "<its first ARGUMENTS_LIMIT characters>"}``, a value
  that is not JSON (an object, NaN, a value nested deeper than
  :data:`~celery_gaffer.protocol.MAX_JSON_DEPTH`) as ``{"repr": "<its repr>"}``, the
  repr cut to the same length (with ``"truncated": true`` when it was cut).
- A traceback keeps its last :data:`TRACEBACK_LIMIT` characters, the frames nearest the
  error and the exception's line, after a first line saying how many were cut.
"""

from __future__ import annotations

import json
import traceback as tracebacks
from typing import Any

from ..protocol import MAX_JSON_DEPTH, json_depth

#: Longest JSON text of ``args`` (and of ``kwargs``) a run record keeps whole.
ARGUMENTS_LIMIT = 8 * 1024
#: Longest traceback a run record keeps (its end).
TRACEBACK_LIMIT = 16 * 1024
# Room kept for the "characters cut" line.
_MARKER_ROOM = 64
# Made once: json.dumps with options builds an encoder on each call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def bounded_arguments(value: Any) -> Any:
    """``value`` (a delivery's args or kwargs) as a run record keeps it (see the module)."""
    if not value:  # (), [], {}, None: the common case, nothing to encode
        return [] if isinstance(value, (tuple, list)) else value
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _as_repr(value)
    if len(text) > ARGUMENTS_LIMIT:
        return {"truncated": True, "preview": text[:ARGUMENTS_LIMIT]}
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(value) > MAX_JSON_DEPTH:
        return _as_repr(value)  # kept, it could not be read back
    return list(value) if isinstance(value, tuple) else value


def _as_repr(value: Any) -> dict[str, Any]:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ never breaks the run record
        text = f"<{type(value).__name__} object>"
    if len(text) > ARGUMENTS_LIMIT:
        return {"repr": text[:ARGUMENTS_LIMIT], "truncated": True}
    return {"repr": text}


def traceback_of(exception: BaseException | None, einfo: Any = None) -> str | None:
    """The formatted traceback of a failure: Celery's (``einfo.traceback``, as its
    ``task_failure`` and ``task_retry`` signals pass it), else ``exception``'s own."""
    text = getattr(einfo, "traceback", None)
    if isinstance(text, str) and text:
        return text
    if exception is None:
        return None
    try:
        return "".join(tracebacks.format_exception(exception))
    except Exception:  # noqa: BLE001 - a broken exception never breaks the run record
        return None


def bounded_traceback(text: str) -> str:
    """``text`` as a run record keeps it: at most :data:`TRACEBACK_LIMIT` characters, its
    end kept, and no NUL (PostgreSQL's text refuses it)."""
    text = text.replace("\x00", "\\x00")
    if len(text) <= TRACEBACK_LIMIT:
        return text
    kept = TRACEBACK_LIMIT - _MARKER_ROOM
    return f"… {len(text) - kept} characters cut …\n{text[-kept:]}"
