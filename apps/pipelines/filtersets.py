import django_filters

from apps.pipelines.choices import RunKind, RunStatus
from apps.pipelines.models import PipelineRun


class RunFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=RunStatus.choices)
    kind = django_filters.ChoiceFilter(choices=RunKind.choices)
    environment = django_filters.CharFilter()

    class Meta:
        model = PipelineRun
        fields = ["status", "kind", "environment"]
