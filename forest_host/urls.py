"""Top-level routes. Each app owns its API routes under /api/forest/v1/ in ``apps/<name>/api/urls.py``."""
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.core import views as core_views
from apps.staff import views as staff_views

api_v1 = [
    path("", include("apps.dispatch.api.urls")),
    path("", include("apps.groves.api.urls")),
    path("", include("apps.placement.api.urls")),
    path("", include("apps.artifacts.api.urls")),
    path("", include("apps.workloads.api.urls")),
    path("", include("apps.ingress.api.urls")),
    path("", include("apps.pipelines.api.urls")),
    path("", include("apps.compute.api.urls")),
    path("", include("apps.staff.api.urls")),
]

handler404 = "apps.core.views.not_found"

urlpatterns = [
    path("", core_views.home, name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("staff/", include("apps.staff.urls")),
    path("api/forest/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    # Process metrics (django-prometheus) and Forest's own, behind staff auth or the scrape token.
    path("metrics", staff_views.metrics_view, name="metrics"),
]
