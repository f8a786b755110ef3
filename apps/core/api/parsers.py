"""The API's JSON parser: reads at most the size limit and hands the bytes to ``apps.core.body.read_json``
(depth, duplicate keys, numbers, NUL and surrogates), so every DRF view — staff/CI and Grove wire alike —
refuses hostile bodies with 400/413 and the Forest error shape before any view code runs."""
from __future__ import annotations

import abc

from django.conf import settings
from rest_framework.parsers import BaseParser, JSONParser

from apps.core.body import read_json
from apps.core.errors import PayloadTooLarge
from apps.core.gcpause import collection_paused


def body_limit() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0


def _parse_bounded(stream, parser_context, limit: int):
    request = (parser_context or {}).get("request")
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
    except ValueError:
        length = 0
    if limit and length > limit:
        raise PayloadTooLarge(
            "payload_too_large", f"The request body is {length} bytes; the limit is {limit} bytes."
        )
    # One byte past the limit is enough to know a body without Content-Length is too large.
    raw = stream.read(limit + 1) if limit else stream.read()
    return read_json(raw, max_bytes=limit)


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return _parse_bounded(stream, parser_context, body_limit())


class LargeBodyJSONParser(BaseParser, abc.ABC):
    """The same JSON reader for an endpoint with a larger body limit of its own (``limit``). Not a
    ``JSONParser``: DRF reads a JSON parser's body through Django's ``request.body``, which enforces the
    site-wide ``DATA_UPLOAD_MAX_MEMORY_SIZE``; this one reads the request stream itself, bounded."""

    media_type = "application/json"

    @abc.abstractmethod
    def limit(self) -> int:
        """The endpoint's own body limit in bytes (a setting of the app that owns the endpoint)."""

    def parse(self, stream, media_type=None, parser_context=None):
        if stream is None:
            return {}
        with collection_paused():  # a large body is many small objects (apps.core.gcpause)
            return _parse_bounded(stream, parser_context, self.limit())
