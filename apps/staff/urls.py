from django.urls import path
from django.views.generic import RedirectView

from apps.staff import views

app_name = "staff"
urlpatterns = [
    path("", RedirectView.as_view(pattern_name="staff:grove-list"), name="index"),
    path("groves/", views.grove_list_view, name="grove-list"),
    path("groves/<slug:slug>/", views.grove_detail_view, name="grove-detail"),
    path("inventory/", views.inventory_view, name="inventory"),
    path("placements/", views.placement_list_view, name="placement-list"),
    path("placements/<int:pk>/", views.placement_detail_view, name="placement-detail"),
    path("runs/", views.run_list_view, name="run-list"),
    path("runs/<uuid:run_id>/", views.run_detail_view, name="run-detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel_view, name="run-cancel"),
    path("artifacts/<int:pk>/", views.artifact_detail_view, name="artifact-detail"),
    path("compute/", views.compute_job_list_view, name="compute-job-list"),
    path("compute/<uuid:job_id>/", views.compute_job_view, name="compute-job"),
    path("refusals/", views.refusal_report_view, name="refusals"),
    path("ingress/", views.ingress_route_list_view, name="ingress-route-list"),
    path("status/", views.status_view, name="status"),
]
