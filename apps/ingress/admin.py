from django.contrib import admin

from apps.accounts.admin import TeamScopedAdmin
from apps.ingress.models import IngressRoute


@admin.register(IngressRoute)
class IngressRouteAdmin(TeamScopedAdmin):
    """Read-only: the edge owns these rows (manage.py forest_edge). A reader sees its teams' routes, as
    ``selectors.routes_visible`` answers the API."""

    list_display = ["hostname", "workload_slug", "grove", "upstream", "state", "rendered_at"]
    list_filter = ["state"]
    search_fields = ["hostname", "workload_slug"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
