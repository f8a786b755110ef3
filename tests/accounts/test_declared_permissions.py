"""Nothing in the staff/CI API is open by omission: every DRF view routed under /api/forest/v1/ that is not
a Grove wire endpoint declares, per method it serves, the model permission it needs."""
from __future__ import annotations

from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver, path
from rest_framework.test import APIClient
from rest_framework.views import APIView

from apps.accounts.api.permissions import Requires, requires
from apps.groves.api.authentication import IsGrove
from tests.factories import UserFactory, api_token_for

WIRE_OPEN = {"grove-enroll", "grove-heartbeat"}  # authenticate inside the view (token / credential)
HANDLERS = ("get", "post", "put", "patch", "delete")


def _patterns(resolver, prefix=""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def _requires(permission) -> list[type[Requires]]:
    """The Requires classes in a permission class or a DRF OR/AND composition of them."""
    found = []
    if isinstance(permission, type) and issubclass(permission, Requires):
        found.append(permission)
    for attr in ("op1_class", "op2_class", "op1", "op2"):
        if hasattr(permission, attr):
            found.extend(_requires(getattr(permission, attr)))
    return found


def test_every_staff_api_view_declares_its_permissions():
    checked = 0
    for route, pattern in _patterns(get_resolver()):
        view = getattr(pattern.callback, "cls", None)
        if not route.startswith("api/forest/v1/") or view is None or pattern.name in WIRE_OPEN:
            continue
        classes = view.permission_classes
        if any(isinstance(c, type) and issubclass(c, IsGrove) for c in classes):
            continue  # a Grove acting for itself
        declared = {method for c in classes for r in _requires(c) for method in r.perms}
        served = {h.upper() for h in HANDLERS if hasattr(view, h)}
        assert served <= declared, f"{route} ({view.__name__}) serves {served - declared} with no permission"
        checked += 1
    assert checked >= 15


class Half(APIView):
    permission_classes = [requires(GET="groves.view_grove")]

    def get(self, request):
        raise AssertionError("not reached without the permission")

    def post(self, request):
        raise AssertionError("never reached: POST has no declared permission")


urlpatterns = [path("half", Half.as_view())]


def test_undeclared_methods_are_refused_and_options_is_metadata_only(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(UserFactory(username='plain', is_staff=False))}")
    with override_settings(ROOT_URLCONF=__name__):
        post = client.post("/half", {}, format="json")
        get = client.get("/half")
        options = client.options("/half")
    assert post.status_code == 403 and post.json()["code"] == "permission_undeclared"
    assert get.status_code == 403 and get.json()["permission"] == "groves.view_grove"
    assert options.status_code == 200
