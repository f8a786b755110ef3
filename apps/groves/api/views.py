"""The staff/CI Grove read API (the Grove-facing wire lives in ``apps.dispatch.api``)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.permissions import IsAuthenticated

from apps.groves.api import serializers as s
from apps.groves.filtersets import GroveFilterSet
from apps.groves.selectors import grove_list


class GroveListView(generics.ListAPIView):
    serializer_class = s.GroveSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = GroveFilterSet

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="List Groves with their latest capacity")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class GroveDetailView(generics.RetrieveAPIView):
    serializer_class = s.GroveDetailSerializer
    permission_classes = [IsAuthenticated]
    lookup_url_kwarg = "grove_id"

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="One Grove with its latest capacity and log tail")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
