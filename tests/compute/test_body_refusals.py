"""Every refusal of the compute submit body that is its own (the step rules it shares with a pipeline node are
pinned in tests/pipelines/test_body_refusals.py), pinned: code, field path and sentence. The expected values
are what the hand parser (``apps/compute/rules.py`` before issue 35) answered for these bodies; the body is now
validated from its declaration (``apps/compute/bodies.py``)."""
from __future__ import annotations

import pytest

from apps.compute.bodies import compute_request
from apps.core.errors import ValidationFailed
from apps.pipelines.rules import graph_digest
from tests.pipelines.test_body_refusals import DIGEST, IMAGE


def st(**fields) -> dict:
    """A compute step; a field given as ``...`` is left out."""
    step = {"name": "prep", "image": IMAGE, "command": ["true"], **fields}
    return {key: value for key, value in step.items() if value is not ...}


COMPUTE_CASES = {
    "no steps": {"name": "j", "steps": []},
    "step name": {"name": "j", "steps": [st(name="Bad Name")]},
    "step names repeat": {"name": "j", "steps": [st(), st()]},
    "step needs an image": {"name": "j", "steps": [st(image=...)]},
    "native step with an image": {"name": "j", "steps": [st(kind="native")]},
    "step kind": {"name": "j", "steps": [st(kind="vm")]},
    "step command null": {"name": "j", "steps": [st(command=None)]},
    "step name and command missing": {"name": "j", "steps": [{"image": IMAGE}]},
    "step backoff without retries": {"name": "j", "steps": [st(backoff={"delay_s": 1})]},
    "step output names repeat": {"name": "j", "steps": [st(outputs=[{"name": "o", "path": "a"},
                                                                    {"name": "o", "path": "b"}])]},
    "step input names nothing": {"name": "j", "steps": [st(inputs=[{}])]},
    "step typo": {"name": "j", "steps": [st(platfrom=["linux/amd64"])]},
    "job name blank": {"name": " ", "steps": [st()]},
    "job team null": {"name": "j", "team": None, "steps": [st()]},
}

COMPUTE_REFUSALS = {
    'no steps': ('compute_steps_empty', 'steps', 'A compute job needs at least one step.'),
        'step name': ('invalid_step_name', 'steps[0].name',
        "Step name 'Bad Name' must match [a-z0-9][a-z0-9_-]* (at most 63)."),
        'step names repeat': ('duplicate_step_name', 'steps[1].name',
        "Step name 'prep' is used twice (steps[0] and steps[1])."),
    'step needs an image': ('image_required', 'steps[0].image', 'An exec node with a container needs an image.'),
        'native step with an image': ('image_not_allowed', 'steps[0].image',
        'A native exec node runs a host command; it takes no image.'),
    'step kind': ('invalid_choice', 'steps[0].kind', 'steps[0].kind must be one of: container, native.'),
        'step command null': ('command_required', 'steps[0].command',
        'An exec node needs a command (a list of arguments).'),
    'step name and command missing': ('field_required', 'steps[0].command', "'command' is required."),
        'step backoff without retries': ('backoff_without_retries', 'steps[0].backoff',
        'A backoff only applies to retries; set retries (at least 1) or leave backoff out.'),
        'step output names repeat': ('duplicate_output_name', 'steps[0].outputs[1].name',
        "name 'o' is used twice (entries 0 and 1)."),
        'step input names nothing': ('input_reference_required', 'steps[0].inputs[0]',
        "steps[0].inputs[0] names its artifact with exactly one of 'artifact' (an id), 'digest' (a blob) or "
        "'image' (an image reference)."),
    'step typo': ('unknown_field', 'steps[0].platfrom', "'platfrom' is not a field here; did you mean 'platform'?"),
    'job name blank': ('field_blank', 'name', 'name must not be empty.'),
    'job team null': ('invalid_type', 'team', 'team must be a string.'),
}


@pytest.mark.parametrize("case", list(COMPUTE_CASES))
def test_each_refusal_keeps_its_code_field_and_sentence(case):
    with pytest.raises(ValidationFailed) as info:
        compute_request(COMPUTE_CASES[case])
    assert (info.value.code, info.value.field, info.value.detail) == COMPUTE_REFUSALS[case]


def test_every_case_has_its_refusal():
    assert set(COMPUTE_CASES) == set(COMPUTE_REFUSALS)


JOB = {"name": "train", "environment": "lab", "team": "ml", "grove": " g1 ", "steps": [
    {"name": "prep", "kind": "container", "image": IMAGE, "command": ["python", "prep.py"],
     "env": {"SEED": "1"}, "inputs": [{"digest": DIGEST, "path": "data/in.bin"}, {"artifact": 3}],
     "outputs": [{"name": "model", "path": "out/model.bin"}], "timeout_s": 600},
    {"name": "train", "kind": "native", "command": ["./train.sh"], "platform": ["darwin/arm64"],
     "resources": {"cpu_milli": 4000, "memory_bytes": 8 << 30},
     "accelerators": {"count": 1, "vendor": "apple", "min_memory_bytes": 1 << 30},
     "retries": 2, "backoff": {"delay_s": 1, "factor": 3}},
    {"name": "third", "image": {"artifact": 9}, "command": ["x"], "retries": 0},
]}


def test_a_job_keeps_the_graph_digest_the_hand_parser_gave_it():
    data = compute_request(JOB)
    assert graph_digest(data["canonical"]) == "sha256:7d9d2ec8b359ccb9c23aa01df2fc469e8203399f6ac644260cfeddeda1481952"
    assert (data["name"], data["environment"], data["team"], data["grove"]) == ("train", "lab", "ml", "g1")
    assert data["step_fields"] == {"prep": "steps[0]", "train": "steps[1]", "third": "steps[2]"}
