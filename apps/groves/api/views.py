"""The staff/CI Grove read API (the Grove-facing wire lives in ``apps.dispatch.api``)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics

from apps.accounts.api.permissions import requires
from apps.groves.api import serializers as s
from apps.groves.filtersets import GroveFilterSet
from apps.groves.selectors import grove_list


class GroveListView(generics.ListAPIView):
    serializer_class = s.GroveSerializer
    permission_classes = [requires(GET="groves.view_grove")]
    filterset_class = GroveFilterSet

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="List Groves with their latest capacity")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class GroveDetailView(generics.RetrieveAPIView):
    serializer_class = s.GroveDetailSerializer
    permission_classes = [requires(GET="groves.view_grove")]
    lookup_url_kwarg = "grove_id"

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="One Grove with its latest capacity and log tail")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
