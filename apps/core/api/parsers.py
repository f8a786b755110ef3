"""The API's JSON parser: reads at most the size limit and hands the bytes to ``apps.core.body.read_json``
(depth, duplicate keys, numbers, NUL and surrogates), so every DRF view — staff/CI and Grove wire alike —
refuses hostile bodies with 400/413 and the Forest error shape before any view code runs."""
from __future__ import annotations

from django.conf import settings
from rest_framework.parsers import JSONParser

from apps.core.body import read_json
from apps.core.errors import PayloadTooLarge


def body_limit() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0


class BoundedJSONParser(JSONParser):
    def limit(self) -> int:
        """The most bytes this parser reads (an endpoint with larger bodies overrides it)."""
        return body_limit()

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        limit = self.limit()
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
