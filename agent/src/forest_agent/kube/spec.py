"""What one Grove job asks of Kubernetes, parsed strictly from the wire payload (docs/wire.md).

The common fields (command, env, timeout, image) are parsed by `forest_agent.wire.messages.Job`, the
same parser the native agent uses; this module adds what only a container executor reads:
`resources`, `trust`, `accelerators`, `accelerator_claim`, `ports`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from forest_agent.kube import names
from forest_agent.outputs import NEEDS_OUTPUTS_ENV, needs_outputs_env
from forest_agent.wire.messages import DataInput, DataOutput, Job, MessageInvalid

JOB_KINDS = ("k8s.job", "k8s.build_job")
DEPLOYMENT_KIND = "k8s.deployment"
CHANGE_KINDS = (*JOB_KINDS, DEPLOYMENT_KIND)
TRUST = ("trusted", "untrusted")
DEFAULT_CPU_MILLI = 1000
DEFAULT_MEMORY_BYTES = 1024**3
_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuRequest:
    """An NVIDIA request as the renderer needs it: count, the GFD memory minimum in MiB, and the
    product Host admitted on (from the claimed inventory item's model), when known."""

    count: int
    min_memory_mib: int | None = None
    product: str | None = None


@dataclass(frozen=True)
class Port:
    name: str
    port: int


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    run_id: str
    node: str
    change_kind: str
    idempotency_key: str
    attempt: int
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    timeout_s: int
    cpu_milli: int
    memory_bytes: int
    trust: str = "trusted"
    gpu: GpuRequest | None = None
    ports: tuple[Port, ...] = ()
    env_from: tuple[tuple[str, str], ...] = ()  # ("config_map" | "secret", object name)
    needs_outputs: str = ""  # JSON of payload.needs_outputs, exported as $FOREST_NEEDS_OUTPUTS
    claimed_devices: tuple[str, ...] = field(default=())
    # Step data: blob inputs fetched by an init container, outputs uploaded by a final container.
    inputs: tuple[DataInput, ...] = ()
    outputs: tuple[DataOutput, ...] = ()

    @property
    def fetches(self) -> bool:
        return any(item.path for item in self.inputs)

    @property
    def has_data(self) -> bool:
        return self.fetches or bool(self.outputs)

    @property
    def data_manifest(self) -> str:
        """What the data containers are told (JSON): the run's node and the job's inputs and outputs."""
        return json.dumps(
            {
                "run_id": self.run_id,
                "node": self.node,
                "inputs": [
                    {k: v for k, v in asdict(item).items() if v is not None}
                    for item in self.inputs
                    if item.path
                ],
                "outputs": [asdict(output) for output in self.outputs],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @property
    def untrusted(self) -> bool:
        return self.trust == "untrusted"

    @property
    def object_name(self) -> str:
        if self.change_kind == DEPLOYMENT_KIND:
            return names.workload_object_name(self.node)
        return names.job_object_name(self.job_id, self.attempt)


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MessageInvalid(f"must be an integer >= {minimum}", field_path=where)
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MessageInvalid("must be an object", field_path=where)
    return value


def parse_job(data: Any, *, models: dict[str, str] | None = None) -> JobSpec:
    """Parse a claimed job; `models` maps this Grove's inventory ids to their GFD product."""
    # A workload or a build_image node may leave the command out: the image's entrypoint runs.
    entrypoint_ok = isinstance(data, dict) and data.get("change_kind") in (DEPLOYMENT_KIND, "k8s.build_job")
    job = Job.parse(data, command_required=not entrypoint_ok)
    payload: dict[str, Any] = job.raw["payload"]
    where = "job.payload"
    if job.change_kind not in CHANGE_KINDS:
        raise MessageInvalid(
            f"{job.change_kind!r} is not a Kubernetes change kind", field_path="job.change_kind"
        )
    if not job.image:
        raise MessageInvalid("a container job needs an image", field_path=f"{where}.image")
    resources = _obj(payload.get("resources") or {}, f"{where}.resources")
    trust = payload.get("trust", "trusted")
    if trust not in TRUST:
        raise MessageInvalid("must be trusted or untrusted", field_path=f"{where}.trust")
    gpu = None
    devices = job.accelerator_devices
    if payload.get("accelerators") is not None:
        acc = _obj(payload["accelerators"], f"{where}.accelerators")
        vendor = acc.get("vendor")
        if vendor not in (None, "nvidia"):
            raise MessageInvalid(
                "a Kubernetes Grove runs NVIDIA accelerators only", field_path=f"{where}.accelerators.vendor"
            )
        minimum = acc.get("min_memory_bytes")
        min_mib = None
        if minimum is not None:
            min_mib = -(-_int(minimum, f"{where}.accelerators.min_memory_bytes", minimum=1) // _MIB)
        products = sorted({product for d in devices if (product := (models or {}).get(d))})
        gpu = GpuRequest(
            count=_int(acc.get("count"), f"{where}.accelerators.count", minimum=1),
            min_memory_mib=min_mib,
            product=products[0] if len(products) == 1 else None,
        )
    if trust == "untrusted" and (job.outputs or any(item.path for item in job.inputs)):
        # Untrusted pods have no network at all (deny-all egress): nothing could fetch or upload.
        raise MessageInvalid(
            "an untrusted step has no network, so it cannot take inputs or leave outputs",
            field_path=f"{where}.inputs",
        )
    ports = []
    for index, raw in enumerate(payload.get("ports") or []):
        raw = _obj(raw, f"{where}.ports[{index}]")
        name = raw.get("name")
        if not isinstance(name, str) or not names.dns_label(name) or len(name) > 15:
            raise MessageInvalid(
                "must be a DNS label of at most 15 characters", field_path=f"{where}.ports[{index}].name"
            )
        port = _int(raw.get("port"), f"{where}.ports[{index}].port", minimum=1)
        if port > 65535:
            raise MessageInvalid("must be a TCP port 1..65535", field_path=f"{where}.ports[{index}].port")
        ports.append(Port(name, port))
    env_from = []
    for index, raw in enumerate(payload.get("env_from") or []):
        raw = _obj(raw, f"{where}.env_from[{index}]")
        if len(raw) != 1 or next(iter(raw)) not in ("config_map", "secret"):
            raise MessageInvalid(
                'must be {"config_map": NAME} or {"secret": NAME}', field_path=f"{where}.env_from[{index}]"
            )
        kind, ref = next(iter(raw.items()))
        if not isinstance(ref, str) or not names.dns_subdomain(ref):
            raise MessageInvalid(
                "must be a DNS-1123 subdomain", field_path=f"{where}.env_from[{index}].{kind}"
            )
        env_from.append((kind, ref))
    return JobSpec(
        job_id=job.job_id,
        run_id=job.run_id,
        node=job.node,
        change_kind=job.change_kind,
        idempotency_key=job.idempotency_key,
        attempt=names.attempt_of(job.idempotency_key),
        image=job.image,
        command=tuple(job.command),
        env=tuple(sorted(job.env.items())),
        timeout_s=job.timeout_s,
        cpu_milli=_int(
            resources.get("cpu_milli", DEFAULT_CPU_MILLI), f"{where}.resources.cpu_milli", minimum=1
        ),
        memory_bytes=_int(
            resources.get("memory_bytes", DEFAULT_MEMORY_BYTES), f"{where}.resources.memory_bytes", minimum=1
        ),
        trust=trust,
        gpu=gpu,
        ports=tuple(ports),
        env_from=tuple(env_from),
        needs_outputs=needs_outputs_env(job.needs_outputs)[NEEDS_OUTPUTS_ENV] if job.needs_outputs else "",
        claimed_devices=devices,
        inputs=job.inputs,
        outputs=job.outputs,
    )
