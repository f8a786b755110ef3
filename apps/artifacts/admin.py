from django.contrib import admin

from apps.artifacts.models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ("digest", "storage_kind", "reference", "media_type", "size", "platform", "created_at")
    list_filter = ("storage_kind",)
    search_fields = ("digest", "reference")
    readonly_fields = [f.name for f in Artifact._meta.fields]

    def has_add_permission(self, request):
        return False
