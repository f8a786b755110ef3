"""Parsing cost of two request bodies: today's hand-written readers vs pydantic v2 vs msgspec.

    .venv/bin/python bench/bodies.py [--seconds 1.0]

Bodies: a native Grove's heartbeat (two GPUs, the hot wire path: ``apps.groves.rules.heartbeat``) and a
compute job of three steps with resources, accelerators, env and outputs (``apps.compute.bodies
.compute_request``: since issue 35 the compute body is validated from its own pydantic declaration, so this
row's "reader" column is that declaration plus the canonical graph it builds). Each is parsed valid and
invalid (one wrong type deep inside: ``capacity.placement_units[0].cpu_milli.free`` a string, and
``steps[2].resources.cpu_milli`` a string). The pydantic and msgspec declarations below carry the same
field names, exact keys (``extra='forbid'`` / ``forbid_unknown_fields``), strict types and bounds as the
readers, and the heartbeat's cross-field checks (free <= allocatable, slots refer to the inventory) as
validators, so each column is the cost of reaching the same answer. Printed: µs per parse (median of 5
runs of ``--seconds`` each) and the ratio to the *rules* column: what the apps parse with now. When the
decision was taken that was the hand-written readers for both bodies; the heartbeat's rules are now its
pydantic declaration (``apps.groves.bodies``) plus the substrate checks and the stored form, so its rules
column is the shipped cost. The decision and both sets of figures are in docs/decisions.md ("Request
bodies: one declaration, pydantic v2 over msgspec").
"""

import argparse
import os
import statistics
import sys
import time
from typing import Annotated, Literal

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from apps.compute import bodies as compute_bodies
from apps.core.errors import ValidationFailed
from apps.groves import rules as grove_rules

GIB = 1024 ** 3


def heartbeat_body(gpus: int = 2) -> dict:
    accelerators = [{"id": f"GPU-{i}", "kind": "gpu", "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
                     "apis": ["cuda"], "memory_bytes": 80 * GIB, "memory_kind": "dedicated",
                     "memory_enforced": True, "share_mode": "exclusive"} for i in range(gpus)]
    slots = [{"inventory_id": a["id"], "allocatable": 1, "free": 1} for a in accelerators]
    return {"version": "forest-agent 0.1.0", "change_kinds": ["native.job"], "isolation": ["host_process"],
            "capacity": {"placement_units": [{"id": "machine", "cpu_milli": {"allocatable": 64000, "free": 64000},
                                              "memory_bytes": {"allocatable": 512 * GIB, "free": 512 * GIB},
                                              "accelerators": slots}],
                         "accelerators": accelerators},
            "log_tail": ["heartbeat ok"]}


def compute_body() -> dict:
    step = {"kind": "native", "command": ["python", "train.py", "--epochs", "3"], "env": {"SEED": "1"},
            "resources": {"cpu_milli": 4000, "memory_bytes": 8 * GIB},
            "accelerators": {"count": 1, "vendor": "nvidia", "min_memory_bytes": 40 * GIB},
            "timeout_s": 3600, "retries": 1, "outputs": [{"name": "model", "path": "out/model.bin"}]}
    return {"name": "train", "team": "ml", "steps": [{"name": f"s{i}", **step} for i in range(3)]}


def bad_heartbeat() -> dict:
    body = heartbeat_body()
    body["capacity"]["placement_units"][0]["cpu_milli"]["free"] = "lots"
    return body


def bad_compute() -> dict:
    body = compute_body()
    body["steps"][2]["resources"]["cpu_milli"] = "4"
    return body


# --- pydantic v2 ---------------------------------------------------------------------------------

class _P(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Count = Annotated[int, Field(ge=0, le=2 ** 62)]


class PAmount(_P):
    allocatable: Count
    free: Count

    @model_validator(mode="after")
    def _fits(self):
        if self.free > self.allocatable:
            raise ValueError("free_exceeds_allocatable")
        return self


class PSlot(_P):
    inventory_id: Annotated[str, Field(min_length=1, max_length=200)]
    allocatable: Annotated[int, Field(ge=0, le=64)]
    free: Annotated[int, Field(ge=0, le=64)]


class PUnit(_P):
    id: Annotated[str, Field(min_length=1, max_length=200)]
    cpu_milli: PAmount
    memory_bytes: PAmount
    accelerators: Annotated[list[PSlot], Field(max_length=64)] = []


class PDevice(_P):
    id: Annotated[str, Field(min_length=1, max_length=200)]
    kind: Literal["gpu", "npu", "tpu", "fpga"]
    vendor: Annotated[str, Field(min_length=1, max_length=50)]
    model: Annotated[str, Field(max_length=200)] = ""
    apis: Annotated[list[Annotated[str, Field(max_length=30)]], Field(max_length=16)]
    memory_bytes: Annotated[int, Field(ge=0, le=2 ** 50)] | None = None
    memory_kind: Literal["dedicated", "unified", "shared"]
    memory_enforced: bool
    share_mode: Literal["exclusive", "time_sliced", "mig", "mps"]


class PCapacity(_P):
    placement_units: Annotated[list[PUnit], Field(max_length=256)]
    accelerators: Annotated[list[PDevice], Field(max_length=64)] = []

    @model_validator(mode="after")
    def _refs(self):
        ids = {a.id for a in self.accelerators}
        for unit in self.placement_units:
            for slot in unit.accelerators:
                if slot.inventory_id not in ids:
                    raise ValueError("unknown_inventory_id")
        return self


class PHeartbeat(_P):
    version: Annotated[str, Field(max_length=100)]
    change_kinds: Annotated[list[Literal["k8s.job", "k8s.deployment", "k8s.build_job", "native.job",
                                         "native.workload"]], Field(max_length=32)]
    isolation: Annotated[list[Literal["container", "host_process", "vm"]], Field(max_length=32)] = []
    capacity: PCapacity
    log_tail: Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=200)] = []
    mesh: dict | None = None


class PResources(_P):
    cpu_milli: Annotated[int, Field(ge=1, le=2 ** 40)] = 1000
    memory_bytes: Annotated[int, Field(ge=1, le=2 ** 60)] = 2 * GIB


class PAccelerators(_P):
    count: Annotated[int, Field(ge=1, le=64)]
    vendor: Annotated[str, Field(min_length=1, max_length=50)] | None = None
    api: Annotated[str, Field(min_length=1, max_length=30)] | None = None
    min_memory_bytes: Annotated[int, Field(ge=0, le=2 ** 50)] = 0


class POutput(_P):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
    path: Annotated[str, Field(max_length=1000)]


class PStep(_P):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
    kind: Literal["container", "native"] = "container"
    image: str | None = None
    command: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")], str] = {}
    platform: list[str] | None = None
    resources: PResources = PResources()
    accelerators: PAccelerators | None = None
    timeout_s: Annotated[int, Field(ge=1, le=7 * 86400)] = 3600
    retries: Annotated[int, Field(ge=0, le=10)] = 0
    backoff: dict | None = None
    inputs: list[dict] = []
    outputs: Annotated[list[POutput], Field(max_length=64)] = []


class PCompute(_P):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    environment: Annotated[str, Field(max_length=100)] = ""
    team: Annotated[str, Field(max_length=100)] = ""
    grove: Annotated[str, Field(max_length=100)] | None = None
    steps: Annotated[list[PStep], Field(min_length=1, max_length=100)]


# --- msgspec (optional: not a dependency of Forest; `pip install msgspec` for its column) -----------

def msgspec_parsers() -> dict | None:
    try:
        import msgspec
    except ImportError:
        return None

    class _M(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
        pass


    MCount = Annotated[int, msgspec.Meta(ge=0, le=2 ** 62)]


    class MAmount(_M):
        allocatable: MCount
        free: MCount

        def __post_init__(self):
            if self.free > self.allocatable:
                raise ValueError("free_exceeds_allocatable")


    class MSlot(_M):
        inventory_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
        allocatable: Annotated[int, msgspec.Meta(ge=0, le=64)]
        free: Annotated[int, msgspec.Meta(ge=0, le=64)]


    class MUnit(_M):
        id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
        cpu_milli: MAmount
        memory_bytes: MAmount
        accelerators: Annotated[list[MSlot], msgspec.Meta(max_length=64)] = []


    class MDevice(_M):
        id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
        kind: Literal["gpu", "npu", "tpu", "fpga"]
        vendor: Annotated[str, msgspec.Meta(min_length=1, max_length=50)]
        apis: Annotated[list[Annotated[str, msgspec.Meta(max_length=30)]], msgspec.Meta(max_length=16)]
        memory_kind: Literal["dedicated", "unified", "shared"]
        memory_enforced: bool
        share_mode: Literal["exclusive", "time_sliced", "mig", "mps"]
        model: Annotated[str, msgspec.Meta(max_length=200)] = ""
        memory_bytes: Annotated[int, msgspec.Meta(ge=0, le=2 ** 50)] | None = None


    class MCapacity(_M):
        placement_units: Annotated[list[MUnit], msgspec.Meta(max_length=256)]
        accelerators: Annotated[list[MDevice], msgspec.Meta(max_length=64)] = []

        def __post_init__(self):
            ids = {a.id for a in self.accelerators}
            for unit in self.placement_units:
                for slot in unit.accelerators:
                    if slot.inventory_id not in ids:
                        raise ValueError("unknown_inventory_id")


    class MHeartbeat(_M):
        version: Annotated[str, msgspec.Meta(max_length=100)]
        change_kinds: Annotated[list[Literal["k8s.job", "k8s.deployment", "k8s.build_job", "native.job",
                                             "native.workload"]], msgspec.Meta(max_length=32)]
        capacity: MCapacity
        isolation: Annotated[list[Literal["container", "host_process", "vm"]], msgspec.Meta(max_length=32)] = []
        log_tail: Annotated[list[Annotated[str, msgspec.Meta(max_length=2000)]], msgspec.Meta(max_length=200)] = []
        mesh: dict | None = None


    class MResources(_M):
        cpu_milli: Annotated[int, msgspec.Meta(ge=1, le=2 ** 40)] = 1000
        memory_bytes: Annotated[int, msgspec.Meta(ge=1, le=2 ** 60)] = 2 * GIB


    class MAccelerators(_M):
        count: Annotated[int, msgspec.Meta(ge=1, le=64)]
        vendor: Annotated[str, msgspec.Meta(min_length=1, max_length=50)] | None = None
        api: Annotated[str, msgspec.Meta(min_length=1, max_length=30)] | None = None
        min_memory_bytes: Annotated[int, msgspec.Meta(ge=0, le=2 ** 50)] = 0


    class MOutput(_M):
        name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
        path: Annotated[str, msgspec.Meta(max_length=1000)]


    class MStep(_M):
        name: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
        command: Annotated[list[Annotated[str, msgspec.Meta(max_length=4096)]], msgspec.Meta(min_length=1,
                                                                                             max_length=256)]
        kind: Literal["container", "native"] = "container"
        image: str | None = None
        env: dict[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")], str] = {}
        platform: list[str] | None = None
        resources: MResources = MResources()
        accelerators: MAccelerators | None = None
        timeout_s: Annotated[int, msgspec.Meta(ge=1, le=7 * 86400)] = 3600
        retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0
        backoff: dict | None = None
        inputs: list[dict] = []
        outputs: Annotated[list[MOutput], msgspec.Meta(max_length=64)] = []


    class MCompute(_M):
        name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
        steps: Annotated[list[MStep], msgspec.Meta(min_length=1, max_length=100)]
        environment: Annotated[str, msgspec.Meta(max_length=100)] = ""
        team: Annotated[str, msgspec.Meta(max_length=100)] = ""
        grove: Annotated[str, msgspec.Meta(max_length=100)] | None = None

    return {"heartbeat": lambda b: msgspec.convert(b, MHeartbeat), "compute": lambda b: msgspec.convert(b, MCompute),
            "error": msgspec.ValidationError, "version": msgspec.__version__}


# --- the measurement -----------------------------------------------------------------------------

EXTRA_ERRORS: list[type[Exception]] = []


def _refusing(parse):
    def run(body):
        try:
            parse(body)
        except (ValidationFailed, pydantic.ValidationError, *EXTRA_ERRORS):
            return
        raise AssertionError("an invalid body was accepted")
    return run


def per_parse_us(fn, body, seconds: float) -> float:
    runs = []
    for _ in range(5):
        n, start = 0, time.perf_counter()
        deadline = start + seconds / 5
        while True:
            for _ in range(50):
                fn(body)
            n += 50
            now = time.perf_counter()
            if now >= deadline:
                break
        runs.append((now - start) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    readers = {
        "heartbeat": lambda b: grove_rules.heartbeat(b, substrate="native"),
        "compute": compute_bodies.compute_request,
    }
    pyd = {"heartbeat": PHeartbeat.model_validate, "compute": PCompute.model_validate}
    msg = msgspec_parsers()
    if msg is not None:
        EXTRA_ERRORS.append(msg["error"])
    cases = [("heartbeat", "valid", heartbeat_body()), ("heartbeat", "invalid", bad_heartbeat()),
             ("compute", "valid", compute_body()), ("compute", "invalid", bad_compute())]
    msgspec_version = msg["version"] if msg else "absent"
    print(f"python {sys.version.split()[0]}, pydantic {pydantic.VERSION}, msgspec {msgspec_version}; "
          f"load: {os.getloadavg()[0]:.2f}")
    print(f"{'body':<10} {'input':<8} {'rules µs':>11} {'pydantic µs':>12} {'msgspec µs':>11} "
          f"{'pyd/rules':>12} {'msg/rules':>12}")
    for name, which, body in cases:
        wrap = (lambda f: f) if which == "valid" else _refusing
        ours = per_parse_us(wrap(readers[name]), body, args.seconds)
        p = per_parse_us(wrap(pyd[name]), body, args.seconds)
        m = per_parse_us(wrap(msg[name]), body, args.seconds) if msg else float("nan")
        print(f"{name:<10} {which:<8} {ours:>11.1f} {p:>12.1f} {m:>11.1f} {p / ours:>12.2f} {m / ours:>12.2f}")


if __name__ == "__main__":
    main()
