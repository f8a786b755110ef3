"""Cursor-free page numbers with a bounded page size: simple for CLIs, safe for the database."""
from rest_framework.pagination import PageNumberPagination


class ForestPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500
