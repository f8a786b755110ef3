"""One compute-job filterset for the API list and the staff page."""
import django_filters

from apps.compute.models import ComputeJob
from apps.core.filters import UtcIsoDateTimeFilter
from apps.pipelines.choices import RunStatus


class ComputeJobFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", label="Name contains")
    status = django_filters.ChoiceFilter(field_name="run__status", choices=RunStatus.choices, empty_label="any")
    environment = django_filters.CharFilter()
    team = django_filters.CharFilter()
    grove = django_filters.CharFilter(field_name="grove_pin", label="Pinned Grove")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte", label="Since")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt", label="Before")

    class Meta:
        model = ComputeJob
        fields = ["name", "status", "environment", "team", "grove", "created_after", "created_before"]
