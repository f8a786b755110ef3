"""Pure ingress rules: host names under the public domains, routes of a live generation, certificates."""
from __future__ import annotations

import pytest

from apps.core import bodies
from apps.core.errors import ValidationFailed
from apps.groves.bodies import HeartbeatMesh
from apps.ingress import rules
from apps.workloads.rules import ingress_hostname


@pytest.mark.parametrize(("name", "expected"), [
    ("shop.apps.example.com", "shop.apps.example.com"),
    ("Shop.Apps.Example.COM.", "shop.apps.example.com"),
    ("apps.example.com", "apps.example.com"),
])
def test_names_under_a_public_domain_are_accepted(name, expected):
    assert ingress_hostname(name, "h", domains=["apps.example.com"], allow_wildcards=False) == expected


@pytest.mark.parametrize(("name", "wildcards", "code"), [
    ("shop.example.org", False, "hostname_outside_domains"),
    ("notapps.example.com", False, "hostname_outside_domains"),
    ("*.apps.example.com", False, "wildcard_not_allowed"),
    ("a.*.apps.example.com", True, "invalid_hostname"),
    ("localhost", False, "invalid_hostname"),
    ("-a.apps.example.com", False, "invalid_hostname"),
    ("a" * 64 + ".apps.example.com", False, "invalid_hostname"),
])
def test_bad_names_are_refused(name, wildcards, code):
    with pytest.raises(ValidationFailed) as caught:
        ingress_hostname(name, "h", domains=["apps.example.com"], allow_wildcards=wildcards)
    assert caught.value.code == code


def test_no_public_domain_configured_refuses_every_name():
    with pytest.raises(ValidationFailed) as caught:
        ingress_hostname("a.example.com", "h", domains=[], allow_wildcards=False)
    assert "FOREST_INGRESS_DOMAINS" in caught.value.detail


def test_a_live_generation_routes_only_the_names_its_workload_holds():
    spec = {"hostnames": ["a.example.com", "b.example.com"], "path_prefix": "/api/", "port": 8080}
    routes = rules.generation_routes(spec_ingress=spec, claimed=["b.example.com"], workload_slug="w", team="t",
                                     environment="prod", grove_id="g", mesh_address="10.8.0.5",
                                     mesh_proxy_port=8480)
    assert [(r.hostname, r.path_prefix, r.upstream_address, r.upstream_port) for r in routes] == [
        ("b.example.com", "/api/", "10.8.0.5", 8480)]
    assert rules.generation_routes(spec_ingress=spec, claimed=["a.example.com"], workload_slug="w", team="",
                                   environment="e", grove_id="g", mesh_address=None, mesh_proxy_port=None) == []
    assert rules.generation_routes(spec_ingress=None, claimed=["a.example.com"], workload_slug="w", team="",
                                   environment="e", grove_id="g", mesh_address="10.8.0.5",
                                   mesh_proxy_port=8480) == []


def test_certificates_come_from_the_template_or_the_wildcard_pair():
    assert rules.certificate_paths("a.example.com", cert_template="/tls/{hostname}/cert.pem",
                                   key_template="/tls/{hostname}/key.pem", wildcard_cert="",
                                   wildcard_key="") == ("/tls/a.example.com/cert.pem", "/tls/a.example.com/key.pem")
    assert rules.certificate_paths("a.example.com", cert_template="/tls/{hostname}.pem", key_template="/k",
                                   wildcard_cert="/tls/star.pem", wildcard_key="/tls/star.key") == (
        "/tls/star.pem", "/tls/star.key")


def _mesh(value, networks):
    """The heartbeat declaration's mesh field (apps.groves.bodies.HeartbeatMesh), parsed as Host parses it."""
    return bodies.parse(HeartbeatMesh, value, context={"mesh_networks": networks}).model_dump()


def test_the_mesh_is_an_ip_literal_inside_a_configured_network():
    assert _mesh({"address": "10.8.0.5", "proxy_port": 8480}, ["10.8.0.0/24"]) == {
        "address": "10.8.0.5", "proxy_port": 8480}
    with pytest.raises(ValidationFailed) as caught:
        _mesh({"address": "10.8.0.5", "proxy_port": 8480}, [])
    assert caught.value.code == "mesh_address_outside_range" and "FOREST_MESH_NETWORKS" in caught.value.detail
