from django.urls import path

from apps.placement.api import views

urlpatterns = [
    path("placements/preview", views.PlacementPreviewView.as_view(), name="placement-preview"),
    path("placements/schema", views.RequirementSchemaView.as_view(), name="placement-requirement-schema"),
    path("placements/batch", views.PlacementBatchView.as_view(), name="placement-batch"),
    path("placements", views.PlacementListView.as_view(), name="placement-list"),
    path("placements/<int:placement_id>", views.PlacementDetailView.as_view(), name="placement-detail"),
    path("placements/<int:placement_id>/replace", views.PlacementReplaceView.as_view(), name="placement-replace"),
]
