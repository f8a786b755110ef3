from django.urls import path

from apps.staff.api import plan, views

urlpatterns = [
    path("staff/groves", views.StaffGroveListView.as_view(), name="staff-api-groves"),
    path("staff/inventory", views.StaffInventoryView.as_view(), name="staff-api-inventory"),
    path("staff/placements", views.StaffPlacementListView.as_view(), name="staff-api-placements"),
    path("staff/refusals", views.StaffRefusalReportView.as_view(), name="staff-api-refusals"),
    path("plan", plan.PlanView.as_view(), name="plan"),
    path("staff/capabilities", views.StaffCapabilityView.as_view(), name="staff-api-capabilities"),
]
