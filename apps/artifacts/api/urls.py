from django.urls import path

from apps.artifacts.api import views

# Uploads whose request body is streamed to the view as it arrives under ASGI (forest_host/asgi.py).
STREAMED_BODY_PATHS = [r"^/api/forest/v1/artifacts/blobs$", r"^/api/forest/v1/artifacts/runs/[^/]+/nodes/[^/]+/blobs/"]

urlpatterns = [
    path("artifacts", views.ArtifactListView.as_view(), name="artifact-list"),
    path("artifacts/<int:pk>", views.ArtifactDetailView.as_view(), name="artifact-detail"),
    path("artifacts/<int:pk>/lineage", views.ArtifactLineageView.as_view(), name="artifact-lineage"),
    path("artifacts/runs/<uuid:run_id>/lineage", views.RunLineageView.as_view(), name="artifact-run-lineage"),
    path("artifacts/blobs", views.BlobUploadView.as_view(), name="artifact-blob-upload"),
    path("artifacts/imports", views.ImageImportView.as_view(), name="artifact-image-import"),
    path("artifacts/gc", views.GcView.as_view(), name="artifact-gc"),
    path("artifacts/runs/<str:run_id>/nodes/<str:node>/blobs/<path:key>", views.GroveBlobWriteView.as_view(),
         name="artifact-run-blob"),
    path("artifacts/<str:digest>/blob", views.BlobDownloadView.as_view(), name="artifact-blob"),
]
