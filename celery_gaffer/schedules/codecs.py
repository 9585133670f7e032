"""Which serializer and compression a schedule's messages may name: JSON only (never
pickle), and a compression kombu's registry knows in this process.

A name kombu does not know fails every send of the schedule in the same way (kombu's
Redis transport even reports it as a lost connection), so it is refused when the
schedule is stored, and Beat refuses it again when it sends (a row written by hand, or
by a process that had a codec this one lacks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kombu import compression, serialization
from kombu.exceptions import SerializerNotInstalled

__all__ = ["SERIALIZERS", "codec_problem"]

#: The serializers a schedule may name: JSON only (never pickle).
SERIALIZERS = ("json",)
# The compression names Celery documents (``task_compression``); kombu knows those whose
# library is installed, and any a project registers itself.
_COMPRESSIONS = ("gzip", "zlib", "bzip2", "lzma", "brotli", "zstd", "lz4")
# kombu's registry functions (public, documented) carry no annotations.
_compression_encoder: Callable[[str], Any] = compression.get_encoder
_serialize: Callable[..., Any] = serialization.dumps


def codec_problem(option: str, value: Any) -> str | None:
    """Why a ``serializer`` or ``compression`` option cannot encode a message (None: it
    can): a serializer other than JSON, or one kombu's registry lacks; a compression
    kombu's registry does not know (a codec whose library is not installed is not there).
    Every fire of such a schedule would fail the same way, so it is refused when stored."""
    where = f"options.{option}"
    if option == "serializer":
        if value not in SERIALIZERS:
            return f"{where}: only {', '.join(SERIALIZERS)} (never pickle), got {value!r}"
        try:
            _serialize([], serializer=value)
        except SerializerNotInstalled:
            return f"{where}: {value!r} is not installed in kombu"
        return None
    if not isinstance(value, str) or not value.isidentifier() or len(value) > 32:
        return f"{where}: expected a codec name, got {value!r}"
    if not _known_compression(value):
        known = ", ".join(name for name in _COMPRESSIONS if _known_compression(name))
        return f"{where}: {value!r} is not a compression kombu knows here (known: {known})"
    return None


def _known_compression(name: str) -> bool:
    try:
        _compression_encoder(name)
    except KeyError:
        return False
    return True
