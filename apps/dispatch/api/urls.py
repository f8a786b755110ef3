from django.urls import path

from apps.dispatch.api import views, wire

urlpatterns = [
    path("groves/enroll", views.EnrollView.as_view(), name="grove-enroll"),
    path("groves/<uuid:grove_id>/heartbeat", views.HeartbeatView.as_view(), name="grove-heartbeat"),
    path("groves/<uuid:grove_id>/changes", wire.changes_view, name="grove-changes"),
    path("groves/<uuid:grove_id>/jobs/<uuid:job_id>/claim", views.JobClaimView.as_view(), name="grove-job-claim"),
    path("groves/<uuid:grove_id>/jobs/<uuid:job_id>/data-token", views.JobDataTokenView.as_view(),
         name="grove-job-data-token"),
    path("groves/<uuid:grove_id>/jobs/<uuid:job_id>/report", views.JobReportView.as_view(),
         name="grove-job-report"),
]
