"""Step data on both executors, the parts that need no Host: the pod's data containers (order, token,
environment, schema-valid Secret), how their failures are observed, the deterministic tar of a directory
output, and the confinement of inputs and outputs to the step's directory."""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path

import pytest
from test_kube_render import CASES, CONFIG, INPUT, OUTPUT, wire_job

from forest_agent import data
from forest_agent.errors import DataRefused
from forest_agent.kube.observe import observe_job
from forest_agent.kube.render import render, render_data_secret
from forest_agent.kube.spec import parse_job
from forest_agent.kube.validate import validate_object
from forest_agent.wire.messages import DataOutput, MessageInvalid


def _pod(case: str) -> dict:
    raw, models = CASES[case]
    job = render(parse_job(copy.deepcopy(raw), models=models), CONFIG)[-1]
    return job["spec"]["template"]["spec"]


def test_outputs_make_the_step_an_init_container_and_the_upload_the_last_container() -> None:
    pod = _pod("data_job")
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-inputs", "step"]
    assert [c["name"] for c in pod["containers"]] == ["upload-outputs"]
    step = pod["initContainers"][1]
    env = {e["name"]: e.get("value") for e in step["env"]}
    assert env["FOREST_INPUT_DATASET"] == "/workspace/data/train.csv"
    assert env["FOREST_OUTPUT_MODEL"] == "/workspace/out/model.bin"
    for container in (pod["initContainers"][0], pod["containers"][0]):
        token = next(e for e in container["env"] if e["name"] == "FOREST_DATA_TOKEN")
        assert token["valueFrom"]["secretKeyRef"]["name"].endswith("-data")  # never the Grove's credential
        assert container["command"][-3:] == [container["command"][-3], "--root", "/workspace"]
    only_inputs = _pod("inputs_only_job")
    assert [c["name"] for c in only_inputs["initContainers"]] == ["fetch-inputs"]
    assert [c["name"] for c in only_inputs["containers"]] == ["step"]
    assert "initContainers" not in _pod("plain_job")


def test_the_data_secret_is_schema_valid_and_owned_by_the_job() -> None:
    raw, _ = CASES["data_job"]
    spec = parse_job(copy.deepcopy(raw))
    job = {"metadata": {"name": spec.object_name, "uid": "1234"}}
    secret = validate_object(render_data_secret(spec, CONFIG, token="t0ken", owner=job))
    assert secret["stringData"] == {"token": "t0ken"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "1234"


def test_an_untrusted_step_cannot_take_data() -> None:
    with pytest.raises(MessageInvalid) as refused:
        parse_job(wire_job(trust="untrusted", inputs=[INPUT], outputs=[OUTPUT]))
    assert refused.value.field_path == "job.payload.inputs"


def _status(name: str, code: int, message: str = "") -> dict:
    return {"name": name, "state": {"terminated": {"exitCode": code, "message": message}}}


def test_a_failed_data_container_is_reported_with_its_code() -> None:
    failed_job = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    }
    pod = {
        "metadata": {"creationTimestamp": "x"},
        "status": {
            "initContainerStatuses": [_status("fetch-inputs", 0), _status("step", 0, '{"loss": 0.1}')],
            "containerStatuses": [
                _status("upload-outputs", 3, "output_missing: output model: nothing at out/m")
            ],
        },
    }
    seen = observe_job(failed_job, [pod])
    assert (seen.state, seen.reason, seen.exit_code) == ("failed", "output_missing", 0)
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    pod["status"]["containerStatuses"] = [_status("upload-outputs", 0)]
    seen = observe_job(done, [pod])
    assert (seen.state, seen.outputs) == ("succeeded", {"loss": 0.1})  # the step's own termination message


def _tree(root: Path, stamp: int) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_text("beta")
    (root / "sub" / "a.txt").write_text("alpha")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o700)
    for path in (root / "b.txt", root / "sub" / "a.txt", root / "run.sh", root / "sub"):
        os.utime(path, (stamp, stamp))
    return root


def test_a_directory_output_is_the_same_tar_whenever_and_wherever_it_is_made(tmp_path: Path) -> None:
    first, second = io.BytesIO(), io.BytesIO()
    data.write_tar(_tree(tmp_path / "one", 1_000_000), first)
    data.write_tar(_tree(tmp_path / "two", 2_000_000), second)
    assert first.getvalue() == second.getvalue()


def test_inputs_and_outputs_stay_inside_the_step_directory(tmp_path: Path) -> None:
    root, outside = tmp_path / "home", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(DataRefused) as refused:
        data._open_confined(root, "link/file")
    assert refused.value.code == "input_path_escape"
    assert not list(outside.iterdir())
    (outside / "secret").write_text("not yours")
    (root / "out").symlink_to(outside / "secret")
    with pytest.raises(DataRefused) as refused:
        data._output_source(root, DataOutput(name="o", path="out", key="attempt-1/o"))
    assert refused.value.code == "output_out_of_scope"
    with pytest.raises(DataRefused) as refused:
        data._output_source(root, DataOutput(name="o", path="missing", key="attempt-1/o"))
    assert refused.value.code == "output_missing"
