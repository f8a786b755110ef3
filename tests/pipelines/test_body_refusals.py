"""Every refusal of the pipeline run body, pinned: code, field path and sentence. The expected values are
what the hand node parser (``apps/pipelines/rules.py`` before issue 35) answered for these bodies; the body is
now validated from its declaration (``apps/pipelines/bodies.py``), and a refusal that moves or rewords
fails here. Keys: the first unknown or missing key by name, as the hand parser named it."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.pipelines.bodies import run_request
from apps.pipelines.rules import graph_digest

IMAGE = "registry.example/tools/python@sha256:" + "a" * 64
DIGEST = "sha256:" + "a" * 64


def ex(**fields) -> dict:
    """An exec node; a field given as ``...`` is left out."""
    node = {"id": "a", "kind": "exec", "image": IMAGE, "command": ["true"], **fields}
    return {key: value for key, value in node.items() if value is not ...}


GRAPH_CASES = {
    "runtime on a deploy node": [{"id": "a", "kind": "deploy", "image": IMAGE, "runtime": "container"}],
    "image on a native node": [ex(runtime="native")],
    "no image, exec": [ex(image=...)],
    "no image, deploy": [{"id": "a", "kind": "deploy"}],
    "no image, build_image": [{"id": "a", "kind": "build_image"}],
    "image artifact, unknown key": [ex(image={"artifact": 1, "digest": DIGEST})],
    "image artifact zero": [ex(image={"artifact": 0})],
    "no command, exec": [ex(command=...)],
    "empty command": [ex(command=[])],
    "env not an object": [ex(env=["A=1"])],
    "too many env": [ex(env={f"K{i}": "v" for i in range(257)})],
    "bad env name": [ex(env={"A": "1", "1BAD": "x"})],
    "input names nothing": [ex(inputs=[{"path": "in"}])],
    "input names two": [ex(inputs=[{"artifact": 1, "digest": DIGEST}])],
    "input digest": [ex(inputs=[{"digest": "sha256:XYZ"}])],
    "input digest too long": [ex(inputs=[{"digest": "sha256:" + "a" * 80}])],
    "input path escapes": [ex(inputs=[{"artifact": 1, "path": "../etc"}])],
    "input path absolute": [ex(inputs=[{"artifact": 1, "path": "/etc"}])],
    "input name": [ex(inputs=[{"artifact": 1, "name": "-x"}])],
    "input names repeat": [ex(inputs=[{"artifact": 1, "path": "a/x"}, {"artifact": 2, "path": "b/x"}])],
    "input paths repeat": [ex(inputs=[{"artifact": 1}, {"artifact": 2, "path": "p", "name": "one"},
                                      {"artifact": 3, "path": "p", "name": "two"}])],
    "output on a deploy node": [{"id": "a", "kind": "deploy", "image": IMAGE, "outputs": [{"name": "o", "path": "o"}]}],
    "output path": [ex(outputs=[{"name": "o", "path": "a/./b"}])],
    "output names repeat": [ex(outputs=[{"name": "o", "path": "a"}, {"name": "o", "path": "b"}])],
    "output without path": [ex(outputs=[{"name": "o"}])],
    "platform empty": [ex(platform=[])],
    "platform unknown": [ex(platform=["linux/amd64", "plan9/mips"])],
    "resources zero": [ex(resources={"memory_bytes": 0})],
    "accelerator api": [ex(accelerators={"count": 1, "vendor": " NVIDIA ", "api": "metal"})],
    "apple count": [ex(accelerators={"count": 2, "vendor": "apple"})],
    "backoff without retries": [ex(backoff={"delay_s": 1})],
    "null backoff with retries": [ex(retries=1, backoff=None)],
    "cap below delay": [ex(retries=1, backoff={"delay_s": 30, "max_s": 10})],
    "retries bound": [ex(retries=99)],
    "trust": [ex(trust="sometimes")],
    "family": [ex(family="gpu")],
    "typo": [ex(comand=["x"])],
    "two unknown keys": [ex(zeta=1, alpha=2)],
    "id and kind missing": [{"image": IMAGE}],
    "kind": [{"id": "a", "kind": 3}],
    "id": [{"id": "Not An Id", "kind": "exec"}],
    "needs blank": [ex(needs=[" "])],
    "duplicate id": [ex(), ex()],
    "unknown need": [ex(needs=["zz"])],
    "needs itself": [ex(needs=["a"])],
    "cycle": [ex(id="a", needs=["c"]), ex(id="b", needs=["a"]), ex(id="c", needs=["b"])],
    "no nodes": [],
}

GRAPH_REFUSALS = {
    'runtime on a deploy node': ('runtime_not_allowed', 'graph.nodes[0].runtime', 'Only exec nodes choose a runtime.'),
        'image on a native node': ('image_not_allowed', 'graph.nodes[0].image',
        'A native exec node runs a host command; it takes no image.'),
    'no image, exec': ('image_required', 'graph.nodes[0].image', 'An exec node with a container needs an image.'),
    'no image, deploy': ('image_required', 'graph.nodes[0].image', 'A deploy node with a container needs an image.'),
        'no image, build_image': ('image_required', 'graph.nodes[0].image',
        'A build_image node with a container needs an image.'),
        'image artifact, unknown key': ('unknown_field', 'graph.nodes[0].image.digest',
        "'digest' is not a field here (expected one of: artifact)."),
        'image artifact zero': ('out_of_range', 'graph.nodes[0].image.artifact',
        'graph.nodes[0].image.artifact must be at least 1.'),
        'no command, exec': ('command_required', 'graph.nodes[0].command',
        'An exec node needs a command (a list of arguments).'),
        'empty command': ('command_required', 'graph.nodes[0].command',
        'graph.nodes[0].command must name a program to run.'),
        'env not an object': ('invalid_type', 'graph.nodes[0].env',
        'graph.nodes[0].env must be an object of NAME: value strings.'),
        'too many env': ('too_many_items', 'graph.nodes[0].env',
        'graph.nodes[0].env has 257 variables; at most 256 are allowed.'),
    'bad env name': ('invalid_env_name', 'graph.nodes[0].env.1BAD', "'1BAD' is not an environment variable name."),
        'input names nothing': ('input_reference_required', 'graph.nodes[0].inputs[0]',
        "graph.nodes[0].inputs[0] names its artifact with exactly one of 'artifact' (an id), 'digest' (a blob) or "
        "'image' (an image reference)."),
        'input names two': ('input_reference_required', 'graph.nodes[0].inputs[0]',
        "graph.nodes[0].inputs[0] names its artifact with exactly one of 'artifact' (an id), 'digest' (a blob) or "
        "'image' (an image reference)."),
        'input digest': ('invalid_digest', 'graph.nodes[0].inputs[0].digest',
        "graph.nodes[0].inputs[0].digest must be 'sha256:' and 64 lowercase hex digits."),
        'input digest too long': ('too_long', 'graph.nodes[0].inputs[0].digest',
        'graph.nodes[0].inputs[0].digest is longer than 80 characters.'),
        'input path escapes': ('invalid_input_path', 'graph.nodes[0].inputs[0].path',
        "graph.nodes[0].inputs[0].path must be a relative path of plain segments (letters, digits, '.', '_', '-'; "
        "not '.' or '..', not starting with '.')."),
        'input path absolute': ('invalid_input_path', 'graph.nodes[0].inputs[0].path',
        "graph.nodes[0].inputs[0].path must be a relative path of plain segments (letters, digits, '.', '_', '-'; "
        "not '.' or '..', not starting with '.')."),
        'input name': ('invalid_data_name', 'graph.nodes[0].inputs[0].name',
        "'-x' must match [A-Za-z0-9][A-Za-z0-9_.-]* (at most 63)."),
        'input names repeat': ('duplicate_input_name', 'graph.nodes[0].inputs[1].name',
        "name 'x' is used twice (entries 0 and 1)."),
        'input paths repeat': ('duplicate_input_path', 'graph.nodes[0].inputs[1].path',
        "path 'p' is used twice (entries 0 and 1)."),
    'output on a deploy node': ('outputs_not_allowed', 'graph.nodes[0].outputs', 'Only exec nodes declare outputs.'),
        'output path': ('invalid_output_path', 'graph.nodes[0].outputs[0].path',
        "graph.nodes[0].outputs[0].path must be a relative path of plain segments (letters, digits, '.', '_', '-'; "
        "not '.' or '..', not starting with '.')."),
        'output names repeat': ('duplicate_output_name', 'graph.nodes[0].outputs[1].name',
        "name 'o' is used twice (entries 0 and 1)."),
    'output without path': ('field_required', 'graph.nodes[0].outputs[0].path', "'path' is required."),
        'platform empty': ('field_blank', 'graph.nodes[0].platform',
        'graph.nodes[0].platform must list at least one platform, or be left out.'),
        'platform unknown': ('invalid_platform', 'graph.nodes[0].platform[1]',
        "'plan9/mips': unknown operating system 'plan9'."),
        'resources zero': ('out_of_range', 'graph.nodes[0].resources.memory_bytes',
        'graph.nodes[0].resources.memory_bytes must be at least 1.'),
        'accelerator api': ('accelerator_api_mismatch', 'graph.nodes[0].accelerators.api',
        "A nvidia accelerator speaks cuda, not metal; drop 'api' or fix the vendor."),
        'apple count': ('apple_accelerator_count', 'graph.nodes[0].accelerators.count',
        'An Apple GPU request must have count 1 (one unified-memory GPU per machine), not 2.'),
        'backoff without retries': ('backoff_without_retries', 'graph.nodes[0].backoff',
        'A backoff only applies to retries; set retries (at least 1) or leave backoff out.'),
        'null backoff with retries': ('invalid_type', 'graph.nodes[0].backoff',
        'graph.nodes[0].backoff must be a JSON object.'),
        'cap below delay': ('out_of_range', 'graph.nodes[0].backoff.max_s',
        'graph.nodes[0].backoff.max_s must be at least 30.'),
    'retries bound': ('out_of_range', 'graph.nodes[0].retries', 'graph.nodes[0].retries must be at most 10.'),
    'trust': ('invalid_choice', 'graph.nodes[0].trust', 'graph.nodes[0].trust must be one of: trusted, untrusted.'),
        'family': ('invalid_choice', 'graph.nodes[0].family',
        'graph.nodes[0].family must be one of: build, compute, runtime.'),
    'typo': ('unknown_field', 'graph.nodes[0].comand', "'comand' is not a field here; did you mean 'command'?"),
        'two unknown keys': ('unknown_field', 'graph.nodes[0].alpha',
        "'alpha' is not a field here (expected one of: accelerators, backoff, command, env, family, grove, id, "
        "image, inputs, kind, needs, outputs, platform, resources, retries, reuse, runtime, timeout_s, trust)."),
    'id and kind missing': ('field_required', 'graph.nodes[0].id', "'id' is required."),
    'kind': ('invalid_node_kind', 'graph.nodes[0].kind', 'Node kind must be one of: exec, build_image, deploy.'),
    'id': ('invalid_node_id', 'graph.nodes[0].id', "Node id 'Not An Id' must match [a-z0-9][a-z0-9_-]* (at most 63)."),
    'needs blank': ('field_blank', 'graph.nodes[0].needs[0]', 'graph.nodes[0].needs[0] must not be empty.'),
    'duplicate id': ('duplicate_node_id', 'graph.nodes[1].id', "Node id 'a' is used twice (nodes[0] and nodes[1])."),
    'unknown need': ('unknown_node_ref', 'graph.nodes[0].needs', "Node 'a' needs 'zz', which is not in the graph."),
    'needs itself': ('graph_cycle', 'graph.nodes[0].needs', "Node 'a' needs itself."),
    'cycle': ('graph_cycle', 'graph.nodes', 'The graph has a cycle: a -> c -> b -> a.'),
    'no nodes': ('graph_empty', 'graph.nodes', 'A graph needs at least one node.'),
}


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_each_refusal_keeps_its_code_field_and_sentence(case):
    with pytest.raises(ValidationFailed) as info:
        run_request({"kind": "build", "graph": {"nodes": GRAPH_CASES[case]}})
    assert (info.value.code, info.value.field, info.value.detail) == GRAPH_REFUSALS[case]


def test_every_case_has_its_refusal():
    assert set(GRAPH_CASES) == set(GRAPH_REFUSALS)


# Every field a node may carry, spelled loosely (padding, case, repeats): its canonical form and digests are
# the ones the hand parser gave, so runs submitted before issue 35 keep their GRAPH_DEDUP identity.
RICH = {"kind": "build", "environment": "lab", "team": "ml", "build_id": "b-1", "graph": {"nodes": [
    {"id": "image", "kind": "build_image", "image": {"artifact": 7}, "trust": "trusted"},
    {"id": "test", "kind": "exec", "runtime": "container", "image": IMAGE, "command": ["pytest"],
     "env": {"SEED": "1", "A": ""},
     "inputs": [{"digest": DIGEST, "path": "data/in.bin", "storage_kind": "cas"}, {"image": " r/x:1 "},
                {"artifact": 4, "name": "zz"}],
     "outputs": [{"name": "report", "path": "out/report.xml"}, {"name": "a", "path": "b"}], "timeout_s": 600,
     "needs": ["image"], "resources": {"cpu_milli": 2000, "memory_bytes": 1 << 30}, "reuse": "never",
     "family": "build", "retries": 2, "backoff": {"delay_s": 1, "factor": 3, "max_s": 30},
     "platform": ["linux/amd64", "linux/arm64"]},
    {"id": "mac", "kind": "exec", "runtime": "native", "command": ["./train.sh"], "platform": ["darwin/arm64"],
     "accelerators": {"count": 1, "vendor": " Apple ", "min_memory_bytes": 1 << 30}, "grove": " studio ",
     "needs": ["test", "image"], "retries": 1},
    {"id": "dep", "kind": "deploy", "image": "x", "command": ["a"],
     "accelerators": {"count": 2, "vendor": "nvidia", "api": "cuda"}},
]}}


def test_a_graph_keeps_the_digest_the_hand_parser_gave_it():
    from apps.pipelines.rules import node_digests

    canonical = run_request(RICH)["canonical"]
    assert graph_digest(canonical) == "sha256:063005f8a83d7460b00b3d36017433a1b772d95226e29e83790125023ac2354f"
    assert node_digests(canonical) == {
        "dep": "sha256:f76005fdb845f4922001eaa5207455f7567d2f99c0903aefc1a946ee66ae2f6c",
        "image": "sha256:867c45ae0bdf5ffe237b3483e5a44713e3712cf577984d61afaa865d1966ce41",
        "test": "sha256:c9e0586c050877f1011d3ae6a8baad8625dd4858663d7382e57b790778058650",
        "mac": "sha256:37ed869775e8887e520c63e96be4d3feed5fb8e6d817a0a7b02b8f297ae9efe5",
    }
