from django.urls import path

from apps.workloads.api import views

urlpatterns = [
    path("workloads", views.NativeWorkloadListView.as_view(), name="workload-list"),
    path("workloads/secrets", views.WorkloadSecretView.as_view(), name="workload-secret"),
    path("workloads/<slug:slug>", views.NativeWorkloadDetailView.as_view(), name="workload-detail"),
    path("groves/<uuid:grove_id>/workloads/<str:generation_id>/status", views.GenerationStatusView.as_view(),
         name="workload-generation-status"),
]
