"""A stored requirement loads through the trusted constructor (``ExecutionRequirement.from_stored``, no
validation at dispatch) into exactly the value that was stored, and the strict parser agrees."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.accelerators.rules import AcceleratorRequest
from apps.accelerators.vocabulary import MAX_ACCELERATOR_COUNT, SINGLE_DEVICE_VENDORS, VENDOR_APIS
from apps.groves.vocabulary import MAX_CPU_MILLI, MAX_MEMORY_BYTES, MAX_PLATFORMS
from apps.placement.requirements import (
    Compatibility,
    ExecutionRequirement,
    PlatformConstraint,
    Resources,
    Target,
)
from apps.placement.vocabulary import ARTIFACT_KINDS, CHANGE_KINDS, FAMILIES, ISOLATION_MODES, TRUST_LEVELS

PLATFORMS = ["linux/amd64", "linux/arm64", "linux/arm/v7", "darwin/arm64", "windows/amd64"]


@st.composite
def accelerators(draw) -> AcceleratorRequest:
    vendor = draw(st.sampled_from([None, *VENDOR_APIS, "acme"]))
    count = 1 if vendor in SINGLE_DEVICE_VENDORS else draw(st.integers(1, MAX_ACCELERATOR_COUNT))
    implied = VENDOR_APIS.get(vendor or "")
    api = implied if implied else draw(st.sampled_from([None, "vulkan", "opencl"]))
    return AcceleratorRequest(count=count, vendor=vendor, api=api,
                              min_memory_bytes=draw(st.integers(0, 1 << 40)))


@st.composite
def platforms(draw) -> PlatformConstraint:
    allowed = draw(st.lists(st.sampled_from(PLATFORMS), unique=True, max_size=MAX_PLATFORMS))
    if not allowed:
        return PlatformConstraint()
    sources = draw(st.lists(st.sampled_from(["node:a", "artifact:sha256:1", "grove:g", "workload:w"]),
                            unique=True, min_size=1, max_size=3))
    return PlatformConstraint(allowed=tuple(allowed), sources=tuple(sources))


requirements = st.builds(
    ExecutionRequirement,
    family=st.sampled_from(FAMILIES),
    compatibility=st.builds(Compatibility, platform=platforms(), artifact_kind=st.sampled_from(ARTIFACT_KINDS),
                            change_kind=st.sampled_from(CHANGE_KINDS), isolation=st.sampled_from(ISOLATION_MODES)),
    resources=st.builds(Resources, cpu_milli=st.integers(0, MAX_CPU_MILLI),
                        memory_bytes=st.integers(0, MAX_MEMORY_BYTES)),
    accelerators=st.none() | accelerators(),
    trust=st.sampled_from(TRUST_LEVELS),
    target=st.none() | st.builds(Target, grove_id=st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,20}\Z")),
)


@settings(max_examples=200, deadline=None, database=None)
@given(requirements)
def test_to_json_then_from_stored_is_the_same_requirement(requirement):
    stored = requirement.to_json()
    assert ExecutionRequirement.from_stored(stored) == requirement
    # The trusted constructor is a shortcut, not a second meaning: the strict parser reads the same value.
    assert ExecutionRequirement.from_json(stored) == requirement
