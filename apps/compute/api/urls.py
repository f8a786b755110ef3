from django.urls import path

from apps.compute.api import views

urlpatterns = [
    path("compute/jobs", views.ComputeJobListView.as_view(), name="compute-job-list"),
    path("compute/jobs/<uuid:job_id>", views.ComputeJobDetailView.as_view(), name="compute-job-detail"),
    path("compute/jobs/<uuid:job_id>/cancel", views.ComputeJobCancelView.as_view(), name="compute-job-cancel"),
    path("compute/jobs/<uuid:job_id>/logs", views.ComputeJobLogsView.as_view(), name="compute-job-logs"),
]
