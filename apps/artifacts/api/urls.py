from django.urls import path

from apps.artifacts.api import views

urlpatterns = [
    path("artifacts/blobs", views.BlobUploadView.as_view(), name="artifact-blob-upload"),
    path("artifacts/<str:digest>/blob", views.BlobDownloadView.as_view(), name="artifact-blob"),
]
