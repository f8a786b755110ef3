from django.contrib import admin

from apps.accounts.admin import TeamScopedAdmin
from apps.artifacts import selectors
from apps.artifacts.models import Artifact, ArtifactPlatformCheck


class ReadOnlyAdmin(TeamScopedAdmin):
    """Artifacts and their checks are written by Host (uploads, builds, imports), never by hand; a reader sees
    what the one artifact selector lets it read (its teams' rows and team-less ones), as the API does."""

    def get_queryset(self, request):
        return selectors.readable(admin.ModelAdmin.get_queryset(self, request), request.user)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("digest", "storage_kind", "reference", "media_type", "size", "platform", "platform_status",
                    "producing_run_id", "producing_node", "created_at")
    list_filter = ("storage_kind", "platform_status", "platform")
    search_fields = ("digest", "reference", "producing_run_id")


@admin.register(ArtifactPlatformCheck)
class ArtifactPlatformCheckAdmin(ReadOnlyAdmin):
    team_field = "artifact__team"

    def get_queryset(self, request):
        return self.model.objects.filter(artifact__in=selectors.readable(Artifact.objects.all(), request.user))

    list_display = ("subject_type", "subject_id", "artifact", "grove", "artifact_platform", "verdict", "enforced",
                    "code", "created_at")
    list_filter = ("verdict", "enforced", "subject_type")
    search_fields = ("subject_id", "artifact__digest")
    list_select_related = ("artifact", "grove")
