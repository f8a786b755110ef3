from django.urls import path

from apps.pipelines.api import views, wire

urlpatterns = [
    path("groves/<uuid:grove_id>/changes", wire.changes_view, name="grove-changes"),
    path("groves/<uuid:grove_id>/jobs/<uuid:job_id>/claim", views.JobClaimView.as_view(), name="grove-job-claim"),
    path("groves/<uuid:grove_id>/jobs/<uuid:job_id>/report", views.JobReportView.as_view(),
         name="grove-job-report"),
    path("pipelines/runs", views.RunListCreateView.as_view(), name="pipeline-run-list"),
    path("pipelines/runs/<uuid:run_id>", views.RunDetailView.as_view(), name="pipeline-run-detail"),
    path("pipelines/runs/<uuid:run_id>/cancel", views.RunCancelView.as_view(), name="pipeline-run-cancel"),
]
