"""Staff pages. One URL renders the full page, or only the table for an htmx request (hx-push-url keeps
filtered views shareable). Access: staff login with a role that reads Groves (viewer and up), and the
observability flag on."""
from __future__ import annotations

from functools import wraps

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from apps.flags.selectors import is_enabled
from apps.groves.filtersets import GroveFilterSet
from apps.groves.models import Grove
from apps.groves.selectors import grove_list
from apps.placement.filtersets import ExecutionPlacementFilterSet
from apps.placement.models import ExecutionPlacement

FLAG = "host.staff.execution_observability"
PAGE_SIZE = 50


def observability_page(view):
    """Staff with a viewer's permissions only; a clear 404 page (not a blank one) while the flag is off."""

    @staff_member_required
    @permission_required("groves.view_grove", raise_exception=True)
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not is_enabled(FLAG):
            return render(request, "staff/feature_off.html", {"flag": FLAG}, status=404)
        return view(request, *args, **kwargs)

    return wrapper


def _list(request: HttpRequest, *, queryset, filterset_class, template: str, table: str, extra=None):
    filterset = filterset_class(request.GET, queryset=queryset)
    page = Paginator(filterset.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"filter": filterset, "page": page, "query": query.urlencode(), **(extra or {})}
    return render(request, table if request.htmx else template, context)


@observability_page
def grove_list_view(request: HttpRequest) -> HttpResponse:
    return _list(request, queryset=grove_list(), filterset_class=GroveFilterSet,
                 template="staff/groves.html", table="staff/_groves_table.html")


@observability_page
def grove_detail_view(request: HttpRequest, slug: str) -> HttpResponse:
    grove = get_object_or_404(grove_list(), slug=slug)
    placements = ExecutionPlacement.objects.filter(grove=grove).order_by("-created_at")[:20]
    return render(request, "staff/grove_detail.html", {"grove": grove, "placements": placements})


@observability_page
def placement_list_view(request: HttpRequest) -> HttpResponse:
    return _list(request, queryset=ExecutionPlacement.objects.select_related("grove"),
                 filterset_class=ExecutionPlacementFilterSet, template="staff/placements.html",
                 table="staff/_placements_table.html",
                 extra={"groves": Grove.objects.order_by("slug").values_list("slug", flat=True)})


@observability_page
def placement_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    placement = get_object_or_404(ExecutionPlacement.objects.select_related("grove"), pk=pk)
    return render(request, "staff/placement_detail.html", {"placement": placement,
                                                           "decision": placement.decision})
