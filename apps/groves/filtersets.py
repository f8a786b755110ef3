"""One Grove filterset for the API list and the staff inventory page."""
from datetime import timedelta

import django_filters
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.core.filters import YesNoFilter
from apps.groves.choices import CapabilityKind, Role, Substrate
from apps.groves.models import Grove, GroveCapability


class GroveFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="filter_q", label="Search")
    substrate = django_filters.ChoiceFilter(choices=Substrate.choices, empty_label="any")
    # Method filters on no model field: a label of their own (else django-filter shows "[invalid name]").
    role = django_filters.ChoiceFilter(choices=Role.choices, method="filter_capability", empty_label="any",
                                       label="Role")
    accelerator_api = django_filters.CharFilter(method="filter_capability", label="Accelerator API")
    stale = YesNoFilter(method="filter_stale", label="Stale")
    ready = YesNoFilter(method="filter_ready", label="Ready (polls for work)")

    class Meta:
        model = Grove
        fields = ["q", "substrate", "role", "accelerator_api", "stale", "ready"]

    def filter_q(self, queryset, name, value):
        return queryset.filter(Q(slug__icontains=value) | Q(name__icontains=value))

    def filter_capability(self, queryset, name, value):
        kind = CapabilityKind.ROLE if name == "role" else CapabilityKind.ACCELERATOR_API
        groves = GroveCapability.objects.filter(kind=kind, value=value.strip().lower()).values("grove_id")
        return queryset.filter(pk__in=groves)

    def filter_stale(self, queryset, name, value):
        fresh = Q(last_heartbeat_at__gte=timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S))
        return queryset.exclude(fresh) if value else queryset.filter(fresh)

    def filter_ready(self, queryset, name, value):
        ready = Q(last_polled_at__gte=timezone.now() - timedelta(seconds=settings.GROVE_READY_WITHIN_S))
        return queryset.filter(ready) if value else queryset.exclude(ready)
