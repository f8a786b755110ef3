import django_filters

from apps.placement.models import ExecutionPlacement


class ExecutionPlacementFilterSet(django_filters.FilterSet):
    grove = django_filters.UUIDFilter(field_name="grove_id")
    grove_slug = django_filters.CharFilter()
    subject_type = django_filters.CharFilter()
    subject_id = django_filters.CharFilter()
    would_refuse = django_filters.BooleanFilter()
    enforced = django_filters.BooleanFilter()
    chooser = django_filters.CharFilter()

    class Meta:
        model = ExecutionPlacement
        fields = ["grove", "grove_slug", "subject_type", "subject_id", "would_refuse", "enforced", "chooser"]
