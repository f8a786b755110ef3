from django.urls import path

from apps.groves.api import views

urlpatterns = [
    path("groves", views.GroveListView.as_view(), name="grove-list"),
    path("groves/<uuid:grove_id>", views.GroveDetailView.as_view(), name="grove-detail"),
]
