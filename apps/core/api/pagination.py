"""Cursor-free page numbers with a bounded page size and a bounded total: simple for CLIs, safe for the
database. ``count`` is exact up to ``FOREST_LIST_TOTAL_CAP``; above it ``count`` is the cap and
``count_capped`` is true ("more than count"), the same bounded count the staff pages show
(apps/core/counting.py). ``next`` is known without the total: the page is read one row long."""
from __future__ import annotations

from collections import OrderedDict

from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from apps.core.counting import MAX_OFFSET_ROWS, capped_count
from apps.core.errors import ValidationFailed


class ForestPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_queryset(self, queryset, request, view=None):
        page_size = self.get_page_size(request)
        if not page_size:
            return None
        self.request = request
        try:
            self.number = int(request.query_params.get(self.page_query_param, 1))
        except (TypeError, ValueError):
            raise NotFound(self.invalid_page_message.format(page_number="?", message="not a number")) from None
        if self.number < 1:
            raise NotFound(self.invalid_page_message.format(page_number=self.number, message="below 1"))
        start = (self.number - 1) * page_size
        if start >= MAX_OFFSET_ROWS:
            raise ValidationFailed(
                "page_too_deep", f"Page {self.number} starts past the first {MAX_OFFSET_ROWS:,} rows, which are as "
                "deep as lists go: narrow the list with its filters instead.", field="page")
        rows = list(queryset[start:start + page_size + 1])
        if self.number > 1 and not rows:
            raise NotFound(self.invalid_page_message.format(page_number=self.number, message="no rows there"))
        self.has_next = len(rows) > page_size
        self.count, self.count_capped = capped_count(queryset)
        return rows[:page_size]

    def get_next_link(self):
        if not self.has_next:
            return None
        return self._link(self.number + 1)

    def get_previous_link(self):
        if self.number <= 1:
            return None
        return self._link(self.number - 1)

    def _link(self, number: int) -> str:
        url = self.request.build_absolute_uri()
        if number == 1:
            return remove_query_param(url, self.page_query_param)
        return replace_query_param(url, self.page_query_param, number)

    def get_paginated_response(self, data):
        return Response(OrderedDict([("count", self.count), ("count_capped", self.count_capped),
                                     ("next", self.get_next_link()), ("previous", self.get_previous_link()),
                                     ("results", data)]))

    def get_paginated_response_schema(self, schema):
        body = super().get_paginated_response_schema(schema)
        body["properties"]["count"]["description"] = "exact up to the cap; the cap itself when count_capped"
        body["properties"] = {"count": body["properties"]["count"],
                              "count_capped": {"type": "boolean", "example": False,
                                               "description": "true: more than count rows match"},
                              **{k: v for k, v in body["properties"].items() if k != "count"}}
        body["required"] = [*body.get("required", []), "count_capped"]
        return body

    def get_html_context(self):  # the browsable API's page links need a page count it no longer has
        return {"previous_url": self.get_previous_link(), "next_url": self.get_next_link(), "page_links": []}
