"""One route filterset for the staff page (and any list of routes)."""
import django_filters
from django.db.models import Q

from apps.ingress.choices import RouteState
from apps.ingress.models import IngressRoute


class IngressRouteFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="filter_q", label="Search")
    state = django_filters.ChoiceFilter(choices=RouteState.choices, empty_label="any")
    grove = django_filters.CharFilter(field_name="grove__slug", label="Grove")

    class Meta:
        model = IngressRoute
        fields = ["q", "state", "grove"]

    def filter_q(self, queryset, name, value):
        return queryset.filter(Q(hostname__icontains=value) | Q(workload_slug__icontains=value))
