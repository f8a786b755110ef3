"""One artifact filterset for the API list (kind, platform, producing run/node, digest)."""
import django_filters

from apps.artifacts.choices import PlatformStatus, StorageKind
from apps.artifacts.models import Artifact
from apps.core.platforms import PlatformError, normalise_platform


class ArtifactFilterSet(django_filters.FilterSet):
    storage_kind = django_filters.ChoiceFilter(choices=StorageKind.choices)
    kind = django_filters.ChoiceFilter(choices=StorageKind.choices, field_name="storage_kind",
                                       label="Storage kind (alias)")
    platform = django_filters.CharFilter(method="filter_platform")
    platform_status = django_filters.ChoiceFilter(choices=PlatformStatus.choices)
    run = django_filters.CharFilter(field_name="producing_run_id")
    node = django_filters.CharFilter(field_name="producing_node")
    digest = django_filters.CharFilter()

    class Meta:
        model = Artifact
        fields = ["storage_kind", "kind", "platform", "platform_status", "run", "node", "digest"]

    def filter_platform(self, queryset, name, value):
        try:
            value = normalise_platform(value)
        except PlatformError:
            return queryset.none()
        return queryset.filter(platform=value)
