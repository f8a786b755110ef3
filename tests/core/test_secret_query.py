"""Issue 33: secrets travel in headers only. Over real HTTP against a live Host: an API URL carrying a
secret in its query string (by name, or a value shaped like one of Host's secrets) is refused with a coded
400 and never read — even a valid job data token gets no bytes that way — and the access loggers never
write an API URL's query string."""
from __future__ import annotations

import logging

import httpx
import pytest

from apps.core.logging import ApiQueryRedactingFilter
from tests.artifacts.conftest import signed_bundle

V1 = "/api/forest/v1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("query", ["token=abc", "access_token=abc", "api_key=abc", "Authorization=Token%20abc",
                                   "x=fgc_abc.def", "q=fat_123.secret", "data_token=eyJ"])
def test_a_secret_in_an_api_query_string_is_refused_unread(live_server, query):
    blob = signed_bundle(b"bytes a URL token must not fetch")
    response = httpx.get(f"{live_server.url}{V1}/artifacts/{blob.digest}/blob?{query}", timeout=15)
    assert response.status_code == 400 and response.json()["code"] == "secret_in_query"
    assert b"bytes a URL token" not in response.content


@pytest.mark.django_db(transaction=True)
def test_ordinary_query_parameters_still_work(live_server, staff_user):
    from tests.factories import api_token_for

    response = httpx.get(f"{live_server.url}{V1}/artifacts?storage_kind=cas", timeout=15,
                         headers={"Authorization": f"Token {api_token_for(staff_user)}"})
    assert response.status_code == 200


@pytest.mark.parametrize(("logger", "args"), [
    ("django.server", ('"%s" %s %s', ("GET /api/forest/v1/artifacts/x/blob?token=Job%20secret HTTP/1.1", "400",
                                       "10"))),
    ("uvicorn.access", ('%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "GET",
                                                     "/api/forest/v1/groves/g/heartbeat?key=fgc_a.b", "1.1", 200))),
])
def test_the_access_log_never_writes_an_api_query_string(logger, args, caplog):
    """The filter is configured on both access loggers in settings.LOGGING; the records here are the
    shapes Django's development server and uvicorn write."""
    assert any(isinstance(f, ApiQueryRedactingFilter) for f in logging.getLogger(logger).filters)
    message, values = args
    with caplog.at_level(logging.INFO, logger=logger):
        logging.getLogger(logger).info(message, *values)
    written = caplog.records[-1].getMessage()
    assert "secret" not in written and "fgc_" not in written and "?[query redacted]" in written


def test_a_non_api_query_string_is_kept(caplog):
    with caplog.at_level(logging.INFO, logger="django.server"):
        logging.getLogger("django.server").info('"%s" %s', "GET /staff/groves/?page=2 HTTP/1.1", "200")
    assert "?page=2" in caplog.records[-1].getMessage()
