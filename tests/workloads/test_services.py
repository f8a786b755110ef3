"""The native workload generation writer, its refusals, the wire payload and observed status."""
from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.artifacts.services import artifact_blob_create
from apps.core.errors import ForestError
from apps.flags.services import flag_override_set
from apps.workloads import services
from apps.workloads.models import IngressHostname, NativeWorkload, WorkloadGeneration
from apps.workloads.selectors import grove_workloads

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


@pytest.fixture
def bundle():
    data = b"pretend this is a tar.gz bundle"
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    signature = base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()
    return artifact_blob_create(chunks=[data], expected_digest=digest, signature=signature, signing_key_id="release")


@pytest.fixture
def native_grove(fresh_grove):
    return fresh_grove(name="mac", roles=("runtime", "compute"), platforms=("darwin/arm64",),
                       change_kinds=["native.job", "native.workload"])


@pytest.fixture(autouse=True)
def _public_domains(settings):
    settings.FOREST_INGRESS_DOMAINS = ["apps.example.com"]


def _spec(bundle, **extra):
    slug = extra.get("slug", "web")
    return {"slug": slug, "bundle_digest": bundle.digest, "command": ["./bin/server", "--port", "8080"],
            "ports": [{"name": "http", "port": 8080}],
            "probes": {"readiness": {"type": "http", "path": "/healthz", "port": 8080}},
            "ingress": {"hostnames": [f"{slug}.apps.example.com"], "port": 8080},
            "secret_refs": ["API_TOKEN"], **extra}


@pytest.fixture
def dispatch_on(settings):
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True


def test_dispatch_switch_off_refuses_and_writes_nothing(bundle, native_grove):
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="s3cret")
    with pytest.raises(ForestError) as exc:
        services.native_workload_apply(body=_spec(bundle))
    assert exc.value.code == "native_dispatch_disabled"
    assert not NativeWorkload.objects.exists() and not WorkloadGeneration.objects.exists()


def test_grove_must_advertise_native_workload(bundle, fresh_grove, dispatch_on):
    fresh_grove(name="jobs-only", roles=("runtime",), change_kinds=["native.job"])
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="s3cret")
    with pytest.raises(ForestError) as exc:
        services.native_workload_apply(body=_spec(bundle, grove="jobs-only"))
    assert exc.value.code == "grove_lacks_native_workload"
    assert not WorkloadGeneration.objects.exists()


def test_generations_are_written_only_on_change(bundle, native_grove, dispatch_on):
    grove, _ = native_grove
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="s3cret")
    workload, first = services.native_workload_apply(body=_spec(bundle))
    assert (first.number, first.grove) == (1, grove)
    assert "s3cret" not in str(first.spec)
    _, same = services.native_workload_apply(body=_spec(bundle))
    assert same.pk == first.pk
    _, second = services.native_workload_apply(body=_spec(bundle, command=["./bin/server", "--port", "8080", "-v"]))
    assert second.number == 2
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="rotated")
    third = services.native_workload_generation_write(workload=workload)
    assert third.number == 3
    payloads, news = grove_workloads(grove, base_url="http://host.test")
    assert news  # generation 3 has not been reported on
    assert [p["generation"] for p in payloads] == [3]
    payload = payloads[0]
    assert payload["secrets"] == {"API_TOKEN": "rotated"}
    assert payload["bundle"]["url"] == f"http://host.test/api/forest/v1/artifacts/{bundle.digest}/blob"
    assert payload["bundle"]["signature"] == bundle.signature and payload["bundle"]["key_id"] == "release"
    assert "ingress" not in payload  # host.deploy.native_ingress is off by default


def test_ingress_is_emitted_only_with_the_flag(bundle, native_grove, dispatch_on):
    grove, _ = native_grove
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    flag_override_set(name="host.deploy.native_ingress", enabled=True, reason="test")
    services.native_workload_apply(body=_spec(bundle))
    (payload,), _ = grove_workloads(grove)
    assert payload["ingress"] == {"hostnames": ["web.apps.example.com"], "path_prefix": "/", "port": 8080}


def _ingress(**fields):
    return lambda s: {**s, "ingress": {"hostnames": ["web.apps.example.com"], "port": 8080, **fields}}


@pytest.mark.parametrize(("mutate", "code", "field"), [
    (_ingress(hostnames=["web.other.example"]), "hostname_outside_domains", "ingress.hostnames[0]"),
    (_ingress(hostnames=["evilapps.example.com"]), "hostname_outside_domains", "ingress.hostnames[0]"),
    (_ingress(hostnames=["*.apps.example.com"]), "wildcard_not_allowed", "ingress.hostnames[0]"),
    (_ingress(hostnames=["web.apps.example.com", "10.0.0.5"]), "hostname_outside_domains", "ingress.hostnames[1]"),
    (_ingress(hostnames=["we_b.apps.example.com"]), "invalid_hostname", "ingress.hostnames[0]"),
    (_ingress(hostnames=["a.apps.example.com; include x"]), "invalid_hostname", "ingress.hostnames[0]"),
    (_ingress(hostnames=["a.apps.example.com", "A.apps.example.com"]), "duplicate_hostname", "ingress.hostnames[1]"),
    (_ingress(hostnames=[]), "field_blank", "ingress.hostnames"),
    (_ingress(path_prefix="/a b/"), "invalid_path_prefix", "ingress.path_prefix"),
    (_ingress(path_prefix="api"), "invalid_path_prefix", "ingress.path_prefix"),
    (_ingress(port=9999), "unknown_port", "ingress.port"),
    (_ingress(listen="10.0.0.5:80"), "unknown_field", "ingress.listen"),
])
def test_ingress_host_names_are_validated(bundle, native_grove, dispatch_on, mutate, code, field):
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    with pytest.raises(ForestError) as exc:
        services.native_workload_apply(body=mutate(_spec(bundle)))
    assert (exc.value.code, exc.value.field) == (code, field)
    assert not NativeWorkload.objects.exists()


def test_wildcards_need_the_setting_and_a_prefix_is_normalised(bundle, native_grove, dispatch_on, settings):
    settings.FOREST_INGRESS_ALLOW_WILDCARDS = True
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    workload, _ = services.native_workload_apply(body=_ingress(hostnames=["*.Apps.Example.com."],
                                                               path_prefix="/api")(_spec(bundle)))
    assert workload.ingress == {"hostnames": ["*.apps.example.com"], "path_prefix": "/api/", "port": 8080}


def test_a_host_name_belongs_to_one_workload(staff_client, bundle, native_grove, dispatch_on):
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    services.native_workload_apply(body=_spec(bundle))
    taken = staff_client.post(f"{V1}/workloads", _ingress(hostnames=["b.apps.example.com", "web.apps.example.com"])(
        _spec(bundle, slug="other")), format="json")
    assert taken.status_code == 409
    assert taken.json() == {"code": "ingress_host_taken", "field": "ingress.hostnames[1]",
                            "detail": "Host name 'web.apps.example.com' is already routed to workload 'web'; "
                                      "remove it there first."}
    assert not NativeWorkload.objects.filter(slug="other").exists()
    assert sorted(IngressHostname.objects.values_list("hostname", flat=True)) == ["web.apps.example.com"]
    # Re-applying keeps the name; dropping it frees it for another workload.
    services.native_workload_apply(body=_spec(bundle))
    services.native_workload_apply(body=_ingress(hostnames=["www.apps.example.com"])(_spec(bundle)))
    services.native_workload_apply(body=_ingress(hostnames=["web.apps.example.com"])(
        _spec(bundle, slug="other")))
    assert IngressHostname.objects.get(hostname="web.apps.example.com").workload.slug == "other"


def test_deleting_a_workload_frees_its_names(staff_client, bundle, native_grove, dispatch_on):
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    services.native_workload_apply(body=_spec(bundle))
    assert staff_client.delete(f"{V1}/workloads/web").status_code == 204
    assert not NativeWorkload.objects.exists() and not IngressHostname.objects.exists()
    assert staff_client.delete(f"{V1}/workloads/web").status_code == 404


@pytest.mark.parametrize(("mutate", "code"), [
    (lambda s: {**s, "secret_refs": ["MISSING"]}, "secret_missing"),
    (lambda s: {**s, "bundle_digest": "sha256:" + "0" * 64}, "artifact_not_found"),
    (lambda s: {**s, "ports": [{"name": "http", "port": 70000}]}, "out_of_range"),
    (lambda s: {**s, "probes": {"readiness": {"type": "http"}}}, "field_required"),
    (lambda s: {**s, "command": []}, "field_blank"),
    (lambda s: {**s, "slug": "Not A Slug"}, "invalid_slug"),
])
def test_bad_specs_are_refused_with_codes(bundle, native_grove, dispatch_on, mutate, code):
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    with pytest.raises(ForestError) as exc:
        services.native_workload_apply(body=mutate(_spec(bundle)))
    assert exc.value.code == code
    assert not NativeWorkload.objects.exists()


def test_unsigned_bundle_is_refused(native_grove, dispatch_on):
    data = b"unsigned"
    artifact = artifact_blob_create(chunks=[data])
    with pytest.raises(ForestError) as exc:
        services.native_workload_apply(body={"slug": "x", "bundle_digest": artifact.digest, "command": ["x"]})
    assert exc.value.code == "bundle_unsigned"


def test_status_reports_normalise_and_supersede(bundle, native_grove, dispatch_on, grove_client, fresh_grove):
    grove, credential = native_grove
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    _, first = services.native_workload_apply(body=_spec(bundle))
    client = grove_client(credential)
    url = f"{V1}/groves/{grove.id}/workloads/{first.id}/status"
    response = client.post(url, {"state": "live", "live": True, "restarts": 0,
                                 "probes": {"readiness": "passing"}}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "live"
    _, second = services.native_workload_apply(body=_spec(bundle, env={"MODE": "v2"}))
    client.post(f"{V1}/groves/{grove.id}/workloads/{second.id}/status", {"state": "crash_loop", "restarts": 5,
                "reason": "crash_loop", "message": "exited 1 five times"}, format="json")
    second.refresh_from_db()
    assert (second.state, second.restarts, second.reason) == ("crash_loop", 5, "crash_loop")
    first.refresh_from_db()
    assert first.state == "live"  # still serving while the new generation crash-loops
    client.post(f"{V1}/groves/{grove.id}/workloads/{second.id}/status", {"state": "live"}, format="json")
    first.refresh_from_db()
    assert first.state == "superseded" and not first.live
    late = client.post(url, {"state": "live"}, format="json")
    assert late.status_code == 409 and late.json()["code"] == "generation_superseded"
    bad = client.post(f"{V1}/groves/{grove.id}/workloads/{second.id}/status", {"state": "exploded"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_choice"
    other, other_credential = fresh_grove(name="other")
    foreign = grove_client(other_credential).post(f"{V1}/groves/{other.id}/workloads/{second.id}/status",
                                                  {"state": "live"}, format="json")
    assert foreign.status_code == 404 and foreign.json()["code"] == "generation_not_found"


def test_api_apply_and_read(staff_client, bundle, native_grove, dispatch_on):
    secret = staff_client.post(f"{V1}/workloads/secrets", {"name": "API_TOKEN", "value": "abc"}, format="json")
    assert secret.status_code == 201 and "value" not in secret.json()
    response = staff_client.post(f"{V1}/workloads", _spec(bundle), format="json")
    assert response.status_code == 200, response.json()
    body = staff_client.get(f"{V1}/workloads/web").json()
    assert body["generations"][0]["number"] == 1 and body["generations"][0]["state"] == "pending"
    assert staff_client.get(f"{V1}/workloads").json()["count"] == 1


def test_the_desired_state_costs_two_queries_whatever_the_workload_count(bundle, native_grove, dispatch_on,
                                                                         django_assert_num_queries):
    grove, _ = native_grove
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    for slug in ("a", "b", "c"):
        services.native_workload_apply(body=_spec(bundle, slug=slug))
    with django_assert_num_queries(2):
        payloads, news = grove_workloads(grove)
    assert [p["workload"] for p in payloads] == ["a", "b", "c"] and news
    assert all(p["secrets"] == {"API_TOKEN": "x"} for p in payloads)
