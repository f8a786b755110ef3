"""Staff observability pages: flag gating, staff-only access, htmx fragments and shared filtersets."""
from __future__ import annotations

import pytest

from apps.accounts.roles import VIEWER
from apps.pipelines.rules import node_requirement
from apps.placement.services import place_execution
from tests.factories import UserFactory, grant
from tests.staff.conftest import FLAG

pytestmark = pytest.mark.django_db


def _place(subject_id: str, target: str | None = None):
    node = {"id": subject_id, "kind": "exec", "runtime": "container", "image": "repo/app@sha256:" + "a" * 64,
            "command": ["true"], "platform": ["linux/amd64"]}
    return place_execution(subject_type="pipeline_node", subject_id=subject_id,
                           requirement=node_requirement(node, run_kind="compute"), target=target)


def test_pages_are_404_with_an_explanation_while_the_flag_is_off(staff_browser):
    for url in ("/staff/groves/", "/staff/placements/"):
        response = staff_browser.get(url)
        assert response.status_code == 404
        assert FLAG.encode() in response.content


def test_pages_need_a_staff_login(client, django_user_model, observability_on):
    assert client.get("/staff/groves/").status_code == 302
    client.force_login(django_user_model.objects.create_user("visitor", is_staff=False))
    assert client.get("/staff/groves/").status_code == 302


def test_inventory_lists_groves_and_filters_with_the_api_filterset(staff_browser, observability_on, estate):
    page = staff_browser.get("/staff/groves/")
    assert page.status_code == 200 and b"<html" in page.content
    assert b"k8s-compute" in page.content and b"gpu-box" in page.content
    assert b"NVIDIA H100" in page.content and b"fresh" in page.content
    fragment = staff_browser.get("/staff/groves/?accelerator_api=cuda", HTTP_HX_REQUEST="true")
    assert b"<html" not in fragment.content and b'id="groves-table"' in fragment.content
    assert b"gpu-box" in fragment.content and b"k8s-compute" not in fragment.content
    native = staff_browser.get("/staff/groves/?substrate=kubernetes", HTTP_HX_REQUEST="true")
    assert b"k8s-compute" in native.content and b"gpu-box" not in native.content


def test_grove_detail_shows_units_inventory_and_placements(staff_browser, observability_on, estate):
    _place("node-1")
    page = staff_browser.get("/staff/groves/k8s-compute/")
    assert page.status_code == 200 and b"pipeline_node:node-1" in page.content
    assert staff_browser.get("/staff/groves/gpu-box/").content.count(b"GPU-") >= 2
    assert staff_browser.get("/staff/groves/nope/").status_code == 404


def test_placements_explain_would_refuse_and_candidates(staff_browser, observability_on, estate):
    _k8s, gpu = estate
    _place("good")
    shadow = _place("shadow", target=gpu.slug)  # a container job on a native Grove: recorded, not refused
    assert shadow.would_refuse
    listing = staff_browser.get("/staff/placements/?would_refuse=true", HTTP_HX_REQUEST="true")
    assert b"pipeline_node:shadow" in listing.content and b"pipeline_node:good" not in listing.content
    assert b"would refuse" in listing.content
    detail = staff_browser.get(f"/staff/placements/{shadow.placement.pk}/")
    codes = [item["code"] for item in shadow.decision["incompatibilities"]]
    assert codes and all(code.encode() in detail.content for code in codes)
    good = staff_browser.get(f"/staff/placements/{_place('good').placement.pk}/")
    assert b'id="candidates"' in good.content and b"k8s-compute" in good.content


def test_pages_need_a_role_that_reads_groves(client, observability_on):
    bare = UserFactory(username="bare-staff", is_staff=True)
    client.force_login(bare)
    assert client.get("/staff/groves/").status_code == 403
    client.force_login(grant(UserFactory(username="viewer-staff", is_staff=False), VIEWER))
    assert client.get("/staff/groves/").status_code == 200
