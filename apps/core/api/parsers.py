"""A JSON parser that refuses oversized bodies before reading them, with the Forest error shape."""
from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from apps.core.errors import PayloadTooLarge


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        if limit and length > limit:
            raise PayloadTooLarge(
                "payload_too_large", f"The request body is {length} bytes; the limit is {limit} bytes."
            )
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError as exc:
            raise ParseError(detail=f"The body is not valid JSON: {exc.detail}") from exc
