from django.urls import path

from apps.ingress.api import views

urlpatterns = [
    path("ingress/routes", views.IngressRouteListView.as_view(), name="ingress-route-list"),
]
