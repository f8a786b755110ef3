"""A generated hostile corpus against every operation in /api/schema/: deep nesting, NUL, lone surrogates,
huge numbers, wrong types, duplicate keys, bad UTF-8, oversized bodies, hostile query strings and path
segments. No response is a 5xx, every API refusal has the error shape, and a refused call leaves every
table exactly as it was (tests.fingerprint).

Bodies are sent with a staff admin's token (or the Grove's own credential on the wire operations), so
they get past authentication and reach the body reader and validation.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from tests.estate import PREVIEW, compute_body, run_body, workload_body
from tests.factories import heartbeat_body
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db


def good_bodies(bundle) -> dict[tuple[str, str], object]:
    """One valid body per JSON operation: the corpus mutates every leaf of it. A new JSON endpoint without
    an entry here fails the test, so it cannot escape the corpus."""
    return {
        ("post", "/api/forest/v1/groves/enroll"): {"token": "fet_0011.abc", "name": "box", "substrate": "native",
                                                   "platforms": ["linux/amd64"], "version": "1"},
        ("post", "/api/forest/v1/groves/{grove_id}/heartbeat"): heartbeat_body(gpus=1, log_tail=["line"]),
        ("post", "/api/forest/v1/groves/{grove_id}/jobs/{job_id}/report"): {"state": "failed", "exit_code": 1,
                                                                          "log_tail": ["x"], "outputs": {"a": 1}},
        ("post", "/api/forest/v1/groves/{grove_id}/workloads/{generation_id}/status"): {
            "state": "live", "live": True, "restarts": 0, "probes": {"readiness": "passing"}, "reason": "",
            "message": "", "log_tail": ["x"]},
        ("post", "/api/forest/v1/compute/jobs"): compute_body("red", "fuzz"),
        ("post", "/api/forest/v1/pipelines/runs"): run_body("red"),
        ("post", "/api/forest/v1/workloads"): workload_body(bundle, "red", "fuzz"),
        ("post", "/api/forest/v1/workloads/secrets"): {"name": "API_TOKEN", "value": "v", "environment": "default"},
        ("post", "/api/forest/v1/placements/preview"): PREVIEW,
        ("post", "/api/forest/v1/placements/batch"): {"items": [{"subject_type": "pipeline_node",
                                                               "subject_id": "hostile-1", "requirement": PREVIEW}]},
        ("post", "/api/forest/v1/placements/{placement_id}/replace"): {"reason": "moving"},
        # A Grove that does not exist: refused before any registry is contacted (a reachable one is
        # tests/artifacts' business).
        ("post", "/api/forest/v1/artifacts/imports"): {"reference": "127.0.0.1:9/app:1", "grove": "no-such-grove"},
        ("post", "/api/forest/v1/artifacts/gc"): {"dry_run": True},
        ("post", "/api/forest/v1/plan"): run_body("red"),
    }


RAW = "__raw_{}__"
RAW_LITERALS = ["1" + "0" * 30, "1e400", "9" * 5000]  # beyond 64 bits, beyond a double, beyond int()
TEXT_ATTACKS = ["nul\x00byte", "\ud800", "x" * 5000]
NUMBER_ATTACKS = [RAW.format(index) for index in range(len(RAW_LITERALS))]
WRONG_TYPES = [[], {}, None, True, -1, "text"]


def _attacks(value, position: int) -> list:
    """What to put in place of one leaf or container: attacks that fit its kind, plus one wrong type
    (a different one at each position, so the corpus covers all of them without multiplying)."""
    wrong = [t for t in WRONG_TYPES if type(t) is not type(value)]
    attacks = [wrong[position % len(wrong)]]
    if isinstance(value, str):
        attacks += TEXT_ATTACKS
    elif isinstance(value, int | float) and not isinstance(value, bool):
        attacks += NUMBER_ATTACKS
    elif isinstance(value, dict):
        attacks.append({**value, "k\x00": 1})
    return attacks


def _paths(value, path=()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


def _at(value, path):
    for key in path:
        value = value[key]
    return value


def _replaced(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    return [_replaced(item, rest, new) if index == head else item for index, item in enumerate(value)]


def _encode(value) -> bytes:
    text = json.dumps(value)
    for index, literal in enumerate(RAW_LITERALS):
        text = text.replace(json.dumps(RAW.format(index)), literal)
    return text.encode()


def corpus(good) -> Iterator[tuple[str, bytes]]:
    """(label, raw body): whole-body attacks, then every leaf and container of ``good`` mutated."""
    text = json.dumps(good)
    yield "deep list", b"[" * 10_000 + b"]" * 10_000
    yield "deep object", b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    yield "just too deep", b"[" * 65 + b"]" * 65
    if isinstance(good, dict) and good:
        first = next(iter(good))
        yield "duplicate key", ("{" + json.dumps(first) + ": null, " + text[1:]).encode()
    yield "NaN", text.replace("1", "NaN", 1).encode() if "1" in text else b"NaN"
    yield "bad utf-8", text.encode()[:-1] + b'\xff\xfe"}'
    yield "lone surrogate raw", b'{"x": "\\udc00"}'
    yield "bom", "\ufeff".encode() + text.encode()
    for label, top in (("list", []), ("string", "x"), ("number", 1), ("null", None), ("true", True)):
        yield f"top-level {label}", json.dumps(top).encode()
    yield "empty object", b"{}"
    yield "not json", b"{not json"
    yield "oversized", b'{"a": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    for position, path in enumerate(_paths(good)):
        for new in _attacks(_at(good, path), position):
            yield f"{'.'.join(map(str, path)) or '<body>'} = {str(new)[:20]!r}", _encode(_replaced(good, path, new))


def _fill(path: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        path = path.replace("{" + name + "}", value)
    return path


@pytest.fixture
def wire(fresh_grove):
    return fresh_grove(name="wire-box")


def _clients(staff_client, wire):
    grove_client = APIClient()
    grove_client.credentials(HTTP_AUTHORIZATION=f"Bearer {wire[1]}")
    return {"apiToken": staff_client, "groveCredential": grove_client, "none": APIClient()}


def _client_for(operation: dict, clients: dict) -> APIClient:
    schemes = [name for entry in operation.get("security", [{}]) for name in entry] or ["none"]
    return clients["groveCredential" if "groveCredential" in schemes and "apiToken" not in schemes
                   else "apiToken" if "apiToken" in schemes else "none"]


def _check(response, label: str, fingerprint: dict) -> dict:
    """No 5xx; an API refusal has the error shape and changed nothing. Returns the fingerprint to compare
    the next call with (fresh when this call was accepted and so may have written)."""
    assert response.status_code < 500, f"{label}: {response.status_code} {response.content[:300]!r}"
    if response.status_code < 400:
        return table_fingerprint()
    if response["Content-Type"].startswith("application/json"):
        assert "code" in response.json(), f"{label}: {response.content[:300]!r}"
    assert changed_tables(fingerprint, table_fingerprint()) == [], label
    return fingerprint


def test_hostile_bodies_on_every_json_operation(staff_client, wire, estate, bundle, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
    schema = staff_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    clients = _clients(staff_client, wire)
    ids = {"grove_id": str(wire[0].id), "job_id": str(uuid.uuid4()), "generation_id": str(uuid.uuid4()),
           "placement_id": str(estate["red"]["placement"].pk)}
    bodies = good_bodies(bundle)
    json_ops = [(method, path, op) for path, ops in schema["paths"].items() for method, op in ops.items()
                if "application/json" in op.get("requestBody", {}).get("content", {})]
    assert {(m, p) for m, p, _ in json_ops} == set(bodies), "every JSON operation needs a good body here"
    fingerprint = table_fingerprint()
    sent = 0
    for method, path, operation in json_ops:
        client = _client_for(operation, clients)
        url = _fill(path, ids)
        for label, raw in corpus(bodies[(method, path)]):
            response = getattr(client, method)(url, data=raw, content_type="application/json")
            fingerprint = _check(response, f"{method.upper()} {path} [{label}]", fingerprint)
            sent += 1
    assert sent > 400


HOSTILE_QUERY = ["nul\x00", "9" * 40, "-1", "../../etc/passwd", "é", "%", "' OR 1=1 --"]
HOSTILE_SEGMENTS = ["%00", "a%00b", "9" * 40, "..%2F..%2Fetc", "%C0%AF", "%FF", "x" * 300]


def test_hostile_query_strings_and_path_segments_on_every_operation(staff_client, wire, estate):
    schema = staff_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    clients = _clients(staff_client, wire)
    ids = {"grove_id": str(wire[0].id), "job_id": str(estate["red"]["job"].id), "run_id": str(estate["red"]["run"].id),
           "generation_id": str(uuid.uuid4()), "placement_id": str(estate["red"]["placement"].pk),
           "slug": "web-red", "digest": "sha256:" + "0" * 64}
    fingerprint = table_fingerprint()
    for path, ops in schema["paths"].items():
        for method, operation in ops.items():
            client = _client_for(operation, clients)
            params = operation.get("parameters", [])
            for param in params:
                if param["in"] == "query":
                    for value in HOSTILE_QUERY:
                        query = {"wait": "0", param["name"]: value}  # never hold a long-poll open
                        response = getattr(client, method)(_fill(path, ids), query)
                        label = f"{method.upper()} {path} ?{param['name']}={value[:20]!r}"
                        fingerprint = _check(response, label, fingerprint)
                elif param["in"] == "path":
                    for segment in HOSTILE_SEGMENTS:
                        url = _fill(path, {**ids, param["name"]: segment})
                        response = getattr(client, method)(url + "?wait=0", content_type="application/json")
                        fingerprint = _check(response, f"{method.upper()} {url}", fingerprint)


def test_nul_in_a_query_string_is_a_400_naming_the_parameter(staff_client):
    response = staff_client.get("/api/forest/v1/pipelines/runs", {"environment": "prod\x00"})
    assert response.status_code == 400
    assert response.json() == {"code": "nul_character", "detail": response.json()["detail"],
                               "field": "query.environment"}
