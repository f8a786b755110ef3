"""ExecutionRequirement: JSON form, strict parsing with codes, normalisation, and the published schema."""
from __future__ import annotations

import copy

import jsonschema
import pytest

from apps.core.errors import ValidationFailed
from apps.placement.requirements import JSON_SCHEMA, ExecutionRequirement

BASE = {
    "family": "build",
    "resources": {"cpu_milli": 1000, "memory_bytes": 1073741824},
    "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["node:build"]},
                      "artifact_kind": "oci_image", "change_kind": "k8s.build_job", "isolation": "container"},
    "trust": "trusted",
}


def with_(path: str, value):
    body = copy.deepcopy(BASE)
    *parents, leaf = path.split(".")
    cursor = body
    for part in parents:
        cursor = cursor.setdefault(part, {})
    if value is DELETE:
        cursor.pop(leaf)
    else:
        cursor[leaf] = value
    return body


DELETE = object()


def test_design_example_round_trips_and_matches_the_schema():
    body = with_("accelerators", {"count": 1, "vendor": "nvidia", "min_memory_bytes": 42949672960})
    body["target"] = {"grove_id": "gpu-1"}
    requirement = ExecutionRequirement.from_json(body)
    out = requirement.to_json()
    assert out["accelerators"] == {"count": 1, "vendor": "nvidia", "api": "cuda", "min_memory_bytes": 42949672960}
    assert out["compatibility"]["platform"] == {"allowed": ["linux/amd64"], "sources": ["node:build"]}
    assert ExecutionRequirement.from_json(out) == requirement
    jsonschema.Draft202012Validator.check_schema(JSON_SCHEMA)
    jsonschema.validate(out, JSON_SCHEMA)


@pytest.mark.parametrize(("body", "code", "field"), [
    (with_("colour", "red"), "unknown_field", "colour"),
    (with_("compatibility.arch", "x"), "unknown_field", "compatibility.arch"),
    (with_("family", "training"), "invalid_choice", "family"),
    (with_("family", DELETE), "field_required", "family"),
    (with_("compatibility.change_kind", "k8s.cronjob"), "invalid_choice", "compatibility.change_kind"),
    (with_("compatibility.isolation", DELETE), "field_required", "compatibility.isolation"),
    (with_("compatibility.platform.allowed", ["linux/amd65"]), "invalid_platform",
     "compatibility.platform.allowed[0]"),
    (with_("compatibility.platform.allowed", ["amd64"]), "invalid_platform", "compatibility.platform.allowed[0]"),
    (with_("resources.cpu_milli", -1), "out_of_range", "resources.cpu_milli"),
    (with_("resources.memory_bytes", -5), "out_of_range", "resources.memory_bytes"),
    (with_("resources.cpu_milli", True), "invalid_type", "resources.cpu_milli"),
    (with_("accelerators", {"count": 2, "vendor": "apple"}), "apple_accelerator_count", "accelerators.count"),
    (with_("accelerators", {"count": 0}), "out_of_range", "accelerators.count"),
    (with_("accelerators", {"count": 1, "vendor": "nvidia", "api": "metal"}), "accelerator_api_mismatch",
     "accelerators.api"),
    (with_("accelerators", {"count": 1, "min_memory_bytes": -1}), "out_of_range", "accelerators.min_memory_bytes"),
    (with_("accelerators", {"vendor": "nvidia"}), "field_required", "accelerators.count"),
    (with_("trust", "maybe"), "invalid_choice", "trust"),
    (with_("target", {"slug": "x"}), "unknown_field", "target.slug"),
    ([], "invalid_type", ""),
])
def test_strict_parsing_refuses_with_a_code_and_field(body, code, field):
    with pytest.raises(ValidationFailed) as exc:
        ExecutionRequirement.from_json(body)
    assert (exc.value.code, exc.value.field or "") == (code, field)


@pytest.mark.parametrize("body", [
    with_("colour", "red"), with_("family", "training"), with_("resources.cpu_milli", -1),
    with_("accelerators", {"count": 2, "vendor": "apple"}), with_("compatibility.change_kind", "k8s.cronjob"),
])
def test_the_schema_rejects_what_the_parser_rejects(body):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, JSON_SCHEMA)


@pytest.mark.parametrize(("accelerators", "expected"), [
    ({"count": 1, "vendor": "NVIDIA"}, {"count": 1, "vendor": "nvidia", "api": "cuda"}),
    ({"count": 1, "vendor": "apple"}, {"count": 1, "vendor": "apple", "api": "metal"}),
    ({"count": 1, "vendor": "Apple", "api": "Metal"}, {"count": 1, "vendor": "apple", "api": "metal"}),
    ({"count": 4, "api": "cuda"}, {"count": 4, "api": "cuda"}),
    ({"count": 2}, {"count": 2}),
    ({"count": 1, "vendor": "acme"}, {"count": 1, "vendor": "acme"}),
])
def test_accelerator_vendor_normalises_to_api(accelerators, expected):
    requirement = ExecutionRequirement.from_json(with_("accelerators", accelerators))
    assert requirement.to_json()["accelerators"] == expected


@pytest.mark.parametrize(("allowed", "expected"), [
    (["linux/arm64/v8", "linux/arm64"], ["linux/arm64"]),
    (["LINUX/AMD64", "linux/amd64/v1"], ["linux/amd64"]),
    (["darwin/arm64", "linux/arm64"], ["darwin/arm64", "linux/arm64"]),
    ([], []),
])
def test_platforms_normalise_keeping_preference_order(allowed, expected):
    requirement = ExecutionRequirement.from_json(with_("compatibility.platform.allowed", allowed))
    assert list(requirement.compatibility.platform.allowed) == expected


def test_defaults_fill_resources_trust_and_sources():
    body = {"family": "compute", "compatibility": {"artifact_kind": "host_command", "change_kind": "native.job",
                                                   "isolation": "host_process"}}
    requirement = ExecutionRequirement.from_json(body)
    assert requirement.to_json() == {
        "family": "compute", "resources": {"cpu_milli": 1000, "memory_bytes": 1 << 30},
        "compatibility": {"platform": {"allowed": [], "sources": ["default"]}, "artifact_kind": "host_command",
                          "change_kind": "native.job", "isolation": "host_process"},
        "trust": "trusted"}
    assert requirement.substrate == "native"
