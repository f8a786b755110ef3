"""Issue 33, in a real browser: a submitter uploads HTML (and SVG) that runs script when rendered; a staff
admin signed in to Host opens its download link. Chromium (Debian's, headless, through Playwright) against a
live Host on PostgreSQL. The link is a download, never a page: no script runs in the staff session, no
request leaves it. Then the browser is made to *render* the answer anyway (Content-Disposition stripped and
the type forced to text/html by a route handler, as a careless proxy might): the CSP sandbox still stops
every script."""
from __future__ import annotations

import pytest

from apps.accounts import roles
from apps.artifacts.services import artifact_blob_create
from tests.artifacts.conftest import sha
from tests.factories import UserFactory, grant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

HTML = (b"<!doctype html><html><head><title>report</title></head><body>"
        b"<script>document.title='pwned';fetch('/api/forest/v1/pwned?c='+encodeURIComponent(document.cookie))"
        b"</script><img src=x onerror=\"document.title='pwned-img'\"></body></html>")
SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" onload="document.title=\'pwned-svg\';'
       b'fetch(\'/api/forest/v1/pwned-svg\')"><circle r="5"/></svg>')


def test_a_hostile_upload_opened_as_staff_runs_no_script(live_server, browser_page):
    submitter = grant(UserFactory(username="red-submitter"), roles.SUBMITTER, teams=("red",))
    artifact_blob_create(chunks=[HTML], media_type="text/html", team="red", uploaded_by=submitter)
    artifact_blob_create(chunks=[SVG], media_type="image/svg+xml", team="red", uploaded_by=submitter)
    staff = grant(UserFactory(username="red-admin"), roles.STAFF_ADMIN, teams=("red",))
    staff.set_password("correct-horse-battery")
    staff.save()

    page = browser_page
    escaped: list[str] = []
    page.on("request", lambda request: escaped.append(request.url) if "pwned" in request.url else None)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "red-admin")
    page.fill("#id_password", "correct-horse-battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    title = page.title()

    for data in (HTML, SVG):
        url = f"{live_server.url}/api/forest/v1/artifacts/{sha(data)}/blob"
        # Followed as a link from a staff page: the browser saves the bytes and stays where it was.
        with page.expect_download() as download_info:
            page.evaluate("url => { const a = document.createElement('a'); a.href = url; "
                          "document.body.appendChild(a); a.click(); }", url)
        download = download_info.value
        with open(download.path(), "rb") as saved:
            assert saved.read() == data
        assert download.suggested_filename == sha(data).replace(":", "-")
        assert page.url == f"{live_server.url}/admin/" and page.title() == title

    # Rendered anyway: the answer's own CSP (sandbox, default-src 'none') still forbids every script.
    def rendered(route):
        response = route.fetch()
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-disposition"}
        route.fulfill(response=response, headers={**headers, "content-type": "text/html"})

    page.route("**/artifacts/*/blob", rendered)
    for data in (HTML, SVG):
        page.goto(f"{live_server.url}/api/forest/v1/artifacts/{sha(data)}/blob")
        page.wait_for_load_state("load")
        assert "pwned" not in page.title()
        # A sandboxed document has an opaque origin: the staff session's cookies are out of its reach.
        assert page.evaluate("() => { try { return document.cookie; } catch (e) { return e.name; } }") == \
            "SecurityError"
    assert escaped == []
