"""Routes through every surface (API, staff page, CLI), scoped to the acting user's teams, and saying why
nothing is rendered while the flag is off."""
from __future__ import annotations

import json

import anyio
import pytest
from rest_framework.test import APIClient
from typer.testing import CliRunner

from apps.accounts.roles import VIEWER
from apps.ingress import services
from apps.ingress.models import IngressRoute
from apps.ingress.selectors import routes_desired
from forest_cli.main import app
from forest_cli.mcp_server import build_server
from tests.factories import UserFactory, api_token_for, grant
from tests.staff.conftest import observability_on  # noqa: F401

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


@pytest.fixture
def routes(mesh_grove, live_workload, ingress_on):
    mac = mesh_grove()
    live_workload("shop", mac, ["shop.apps.example.com"], team="web", path_prefix="/api/")
    live_workload("blog", mac, ["blog.apps.example.com"], team="ml")
    services.routes_sync(routes_desired())
    IngressRoute.objects.filter(hostname="blog.apps.example.com").update(
        state="failed", last_error='[emerg] cannot load certificate "/etc/forest/tls/blog.apps.example.com.pem"')


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    return client


def test_the_api_lists_routes_with_state_and_error(staff_client, routes):
    body = staff_client.get(f"{V1}/ingress/routes").json()
    assert (body["enabled"], body["reason"]) == (True, "")
    blog, shop = body["results"]
    assert (shop["hostname"], shop["path_prefix"], shop["workload"], shop["grove"], shop["upstream"],
            shop["state"]) == ("shop.apps.example.com", "/api/", "shop", "mac", "10.8.0.5:8480", "pending")
    assert blog["state"] == "failed" and "cannot load certificate" in blog["last_error"]
    failed = staff_client.get(f"{V1}/ingress/routes", {"state": "failed"}).json()["results"]
    assert [r["hostname"] for r in failed] == ["blog.apps.example.com"]


def test_a_team_member_sees_only_the_routes_of_their_teams(routes):
    viewer = grant(UserFactory(username="viewer", is_staff=True), VIEWER, teams=("web",))
    body = _client(viewer).get(f"{V1}/ingress/routes").json()
    assert [r["hostname"] for r in body["results"]] == ["shop.apps.example.com"]
    assert APIClient().get(f"{V1}/ingress/routes").status_code == 401


def test_with_the_flag_off_the_api_says_why(staff_client):
    body = staff_client.get(f"{V1}/ingress/routes").json()
    assert body["enabled"] is False and body["results"] == []
    assert "host.deploy.native_ingress is off" in body["reason"]


def test_the_staff_page_is_actor_scoped(client, staff_user, routes, observability_on):  # noqa: F811
    client.force_login(staff_user)
    page = client.get("/staff/ingress/").content.decode()
    assert "shop.apps.example.com" in page and "blog.apps.example.com" in page
    assert "10.8.0.5:8480" in page and "cannot load certificate" in page
    assert '<span class="badge bad">failed</span>' in page
    fragment = client.get("/staff/ingress/?state=pending", HTTP_HX_REQUEST="true").content.decode()
    assert "shop.apps.example.com" in fragment and "blog.apps.example.com" not in fragment
    viewer = grant(UserFactory(username="viewer", is_staff=True), VIEWER, teams=("ml",))
    client.force_login(viewer)
    page = client.get("/staff/ingress/").content.decode()
    assert "blog.apps.example.com" in page and "shop.apps.example.com" not in page


def test_the_staff_page_says_when_ingress_is_off(client, staff_user, observability_on):  # noqa: F811
    client.force_login(staff_user)
    page = client.get("/staff/ingress/").content.decode()
    assert 'id="ingress-off"' in page and "host.deploy.native_ingress is off" in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_the_routes(live_server, staff_user, routes):
    token = api_token_for(staff_user)
    result = CliRunner().invoke(app, ["--host", live_server.url, "--token", token, "--json", "ingress",
                                      "--state", "failed"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [r["hostname"] for r in json.loads(result.output)["results"]] == ["blog.apps.example.com"]
    table = CliRunner().invoke(app, ["--host", live_server.url, "--token", token, "ingress"],
                               catch_exceptions=False)
    # The table folds long cells to the terminal's width: look for words that fit in a narrow column.
    assert table.exit_code == 0 and "pending" in table.output and "failed" in table.output, table.output
    # The MCP tool answers the same (the server in this process, over the same API).
    server = build_server(host=live_server.url, token=token)
    answer = anyio.run(lambda: server.call_tool("ingress_routes", {"state": "pending"}))
    assert "shop.apps.example.com" in json.dumps(answer, default=str)
    assert "blog.apps.example.com" not in json.dumps(answer, default=str)
