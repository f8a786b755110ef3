"""The lean wire routes decide "would Django serve this request itself?" with Django's own code: the Host
check (``ALLOWED_HOSTS``, ``USE_X_FORWARDED_HOST``) and the HTTPS redirect (``SECURE_SSL_REDIRECT``,
``SECURE_PROXY_SSL_HEADER``) come out as Django's ``ASGIRequest`` and ``SecurityMiddleware`` decide them,
for every combination here. No database."""
from __future__ import annotations

import pytest

from apps.dispatch.api import lean


def _scope(*, scheme: str = "http", headers: tuple = (), query: bytes = b"") -> dict:
    return {"type": "http", "method": "POST", "path": "/api/forest/v1/groves/x/heartbeat", "scheme": scheme,
            "query_string": query, "root_path": "", "server": ("10.0.0.1", 8000), "client": ("10.0.0.2", 1),
            "headers": [(name.encode(), value.encode()) for name, value in headers]}


def _djangos_answer(scope) -> tuple:
    """What Django's own request and middleware decide: the Host check, HTTPS, and a redirect or not."""
    import io

    from django.core.exceptions import DisallowedHost
    from django.core.handlers.asgi import ASGIRequest
    from django.middleware.security import SecurityMiddleware

    request = ASGIRequest(scope, io.BytesIO())
    try:
        request.get_host()
    except DisallowedHost:
        return False, request.is_secure()
    return SecurityMiddleware(lambda r: None).process_request(request) is None, request.is_secure()


@pytest.mark.parametrize("proxy", [None, ("HTTP_X_FORWARDED_PROTO", "https")])
@pytest.mark.parametrize("redirect", [False, True])
@pytest.mark.parametrize(("scheme", "headers"), [
    ("http", (("host", "testserver"),)),
    ("https", (("host", "testserver"),)),
    ("http", (("host", "evil.example"),)),
    ("http", ()),  # no Host header: Django falls back to SERVER_NAME
    ("http", (("host", "testserver"), ("x-forwarded-proto", "https"))),
    ("https", (("host", "testserver"), ("x-forwarded-proto", "http"))),  # the proxy's word wins over the scheme
    ("http", (("host", "testserver"), ("x-forwarded-proto", "https, http"))),  # the first of a list
    ("http", (("host", "testserver"), ("x-forwarded-proto", "https"), ("x-forwarded-proto", "http"))),
    ("http", (("host", "evil.example"), ("x-forwarded-host", "testserver"))),
    ("http", (("host", "testserver:8000"),)),
], ids=lambda value: str(value))
def test_the_host_check_and_https_redirect_are_djangos_own(settings, proxy, redirect, scheme, headers):
    """The lean routes serve a request only when Django's own request (``ASGIRequest``) and middleware would
    pass its Host and not redirect it, whatever the proxy settings (lean.py ``_plain_enough``, ``_secure``)."""
    settings.SECURE_PROXY_SSL_HEADER = proxy
    settings.SECURE_SSL_REDIRECT = redirect
    settings.ALLOWED_HOSTS = ["testserver", "10.0.0.1"]
    for forwarded_host in (False, True):
        settings.USE_X_FORWARDED_HOST = forwarded_host
        scope = _scope(scheme=scheme, headers=headers)
        assert (lean._plain_enough(scope), lean._secure(scope)) == _djangos_answer(_scope(scheme=scheme,
                                                                                          headers=headers))
