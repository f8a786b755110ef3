from django.urls import path

from apps.pipelines.api import views

urlpatterns = [
    path("pipelines/runs", views.RunListCreateView.as_view(), name="pipeline-run-list"),
    path("pipelines/runs/<uuid:run_id>", views.RunDetailView.as_view(), name="pipeline-run-detail"),
    path("pipelines/runs/<uuid:run_id>/cancel", views.RunCancelView.as_view(), name="pipeline-run-cancel"),
]
