"""Typed, validated forms of what Host sends in `changes` (docs/wire.md: Job, Generation, Probe).

Parsing is strict: a malformed message raises `MessageInvalid` with the offending field, so the agent
can refuse that one item with a code instead of half-running it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forest_agent.errors import AgentError


class MessageInvalid(AgentError):
    code = "payload_invalid"

    def __init__(self, message: str, *, field_path: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field_path = field_path


def _str(data: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise MessageInvalid("must be a non-empty string", field_path=f"{where}.{key}")
    return value


def _argv(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise MessageInvalid("must be a non-empty list of strings", field_path=where)
    return list(value)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MessageInvalid("must be an object of string values", field_path=where)
    for key in value:
        if not key or "=" in key or "\0" in key:
            raise MessageInvalid(f"{key!r} is not a valid environment name", field_path=where)
    return dict(value)


def _int(data: dict[str, Any], key: str, where: str, default: int | None, *, minimum: int = 0) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MessageInvalid(f"must be an integer >= {minimum}", field_path=f"{where}.{key}")
    return value


def _port(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise MessageInvalid("must be a TCP port 1..65535", field_path=where)
    return value


def _claimed_devices(claim: Any, where: str) -> tuple[str, ...]:
    """`accelerator_claim = {"unit_id", "devices": [{"inventory_id", "count"}]}` -> the inventory ids."""
    if claim is None:
        return ()
    if not isinstance(claim, dict) or not isinstance(claim.get("devices", []), list):
        raise MessageInvalid("must be {unit_id, devices: [...]}", field_path=f"{where}.accelerator_claim")
    out: list[str] = []
    for index, device in enumerate(claim.get("devices", [])):
        inventory_id = device.get("inventory_id") if isinstance(device, dict) else None
        # A comma would split one id into two in CUDA_VISIBLE_DEVICES.
        if not isinstance(inventory_id, str) or not inventory_id or "," in inventory_id:
            raise MessageInvalid(
                "must be a non-empty id without commas",
                field_path=f"{where}.accelerator_claim.devices[{index}].inventory_id",
            )
        out.append(inventory_id)
    return tuple(out)


def _needs_outputs(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise MessageInvalid("must be an object of node id -> outputs object", field_path=where)
    return value


_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_SEGMENT = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _data_path(value: Any, where: str) -> str:
    """A relative path of plain segments (Host checked it; the executor trusts nothing it did not parse)."""
    if (
        not isinstance(value, str)
        or value.startswith("/")
        or not all(_SEGMENT.match(segment) for segment in value.split("/"))
    ):
        raise MessageInvalid("must be a relative path of plain segments", field_path=where)
    return value


def _data_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise MessageInvalid("must be a name of letters, digits, '.', '_' or '-'", field_path=where)
    return value


@dataclass(frozen=True)
class DataInput:
    """`payload.inputs[]`: an artifact Host resolved at submit. A blob with a `path` is fetched there and
    verified against `digest`; an image (no path) is handed to the step by its pinned `reference`."""

    name: str
    digest: str
    size: int | None
    storage_kind: str
    reference: str
    path: str | None

    @classmethod
    def parse(cls, data: Any, where: str) -> DataInput:
        if not isinstance(data, dict):
            raise MessageInvalid("must be an object", field_path=where)
        digest = data.get("digest")
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise MessageInvalid("must be sha256:<64 hex>", field_path=f"{where}.digest")
        size = data.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise MessageInvalid("must be a byte count", field_path=f"{where}.size")
        path = data.get("path")
        return cls(
            name=_data_name(data.get("name"), f"{where}.name"),
            digest=digest,
            size=size,
            storage_kind=str(data.get("storage_kind") or ""),
            reference=str(data.get("reference") or ""),
            path=_data_path(path, f"{where}.path") if path is not None else None,
        )


@dataclass(frozen=True)
class DataOutput:
    """`payload.outputs[]`: a path the executor uploads after a successful command, under `key`."""

    name: str
    path: str
    key: str

    @classmethod
    def parse(cls, data: Any, where: str) -> DataOutput:
        if not isinstance(data, dict):
            raise MessageInvalid("must be an object", field_path=where)
        return cls(
            name=_data_name(data.get("name"), f"{where}.name"),
            path=_data_path(data.get("path"), f"{where}.path"),
            key=_data_path(data.get("key"), f"{where}.key"),
        )


def _data_list(value: Any, where: str, parse: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MessageInvalid("must be a list", field_path=where)
    return tuple(parse(item, f"{where}[{index}]") for index, item in enumerate(value))


@dataclass(frozen=True)
class Job:
    job_id: str
    run_id: str
    node: str
    change_kind: str
    idempotency_key: str
    command: list[str]
    env: dict[str, str]
    timeout_s: int
    workdir: str | None
    image: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # Inventory ids of the devices Host claimed for this job (`payload.accelerator_claim`), in order.
    accelerator_devices: tuple[str, ...] = ()
    # What the steps this one needs reported (`payload.needs_outputs`: {node id: outputs}).
    needs_outputs: dict[str, Any] = field(default_factory=dict, compare=False)
    # Step data (`payload.inputs` / `payload.outputs`): fetched before the command, uploaded after it.
    inputs: tuple[DataInput, ...] = ()
    outputs: tuple[DataOutput, ...] = ()

    @classmethod
    def parse(cls, data: Any, where: str = "job", *, command_required: bool = True) -> Job:
        """`command_required=False` lets a container workload run its image's entrypoint."""
        if not isinstance(data, dict):
            raise MessageInvalid("must be an object", field_path=where)
        payload = data.get("payload")
        if not isinstance(payload, dict):
            raise MessageInvalid("must be an object", field_path=f"{where}.payload")
        workdir = _str(payload, "workdir", f"{where}.payload", required=False)
        if workdir is not None and (workdir.startswith("/") or ".." in workdir.split("/")):
            raise MessageInvalid(
                "must be a relative path inside the job workspace", field_path=f"{where}.payload.workdir"
            )
        return cls(
            job_id=_str(data, "job_id", where) or "",
            run_id=str(data.get("run_id") or ""),
            node=str(data.get("node") or ""),
            change_kind=_str(data, "change_kind", where) or "",
            idempotency_key=str(data.get("idempotency_key") or ""),
            command=(
                _argv(payload.get("command"), f"{where}.payload.command")
                if command_required or payload.get("command")
                else []
            ),
            env=_str_map(payload.get("env"), f"{where}.payload.env"),
            timeout_s=_int(payload, "timeout_s", f"{where}.payload", 3600, minimum=1),
            workdir=workdir,
            image=_str(payload, "image", f"{where}.payload", required=False),
            raw=data,
            accelerator_devices=_claimed_devices(payload.get("accelerator_claim"), f"{where}.payload"),
            needs_outputs=_needs_outputs(payload.get("needs_outputs"), f"{where}.payload.needs_outputs"),
            inputs=_data_list(payload.get("inputs"), f"{where}.payload.inputs", DataInput.parse),
            outputs=_data_list(payload.get("outputs"), f"{where}.payload.outputs", DataOutput.parse),
        )


@dataclass(frozen=True)
class Probe:
    type: str
    port: int | None
    path: str
    command: list[str]
    period_s: float
    timeout_s: float
    failure_threshold: int

    @classmethod
    def parse(cls, data: Any, where: str) -> Probe:
        if not isinstance(data, dict):
            raise MessageInvalid("must be an object", field_path=where)
        kind = data.get("type")
        if kind not in ("http", "tcp", "exec"):
            raise MessageInvalid("must be one of http, tcp, exec", field_path=f"{where}.type")
        port = _port(data.get("port"), f"{where}.port") if kind in ("http", "tcp") else None
        path = data.get("path", "/") if kind == "http" else ""
        if kind == "http" and (not isinstance(path, str) or not path.startswith("/")):
            raise MessageInvalid("must start with '/'", field_path=f"{where}.path")
        command = _argv(data.get("command"), f"{where}.command") if kind == "exec" else []
        return cls(
            type=kind,
            port=port,
            path=path,
            command=command,
            period_s=float(_int(data, "period_s", where, 5, minimum=1)),
            timeout_s=float(_int(data, "timeout_s", where, 2, minimum=1)),
            failure_threshold=_int(data, "failure_threshold", where, 3, minimum=1),
        )


@dataclass(frozen=True)
class BundleRef:
    url: str
    digest: str
    size: int | None
    signature: str
    key_id: str


@dataclass(frozen=True)
class Ingress:
    """Host names (and an optional path prefix) the mesh proxy sends to the workload's local port."""

    hostnames: tuple[str, ...]
    port: int
    path_prefix: str = "/"


@dataclass(frozen=True)
class RestartPolicy:
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    crash_loop_after: int = 5


MAX_STOP_GRACE_S = 3600


@dataclass(frozen=True)
class Generation:
    generation_id: str
    workload: str
    generation: int
    bundle: BundleRef
    command: list[str]
    env: dict[str, str]
    secrets: dict[str, str] = field(repr=False)
    secrets_mode: str
    ports: list[dict[str, Any]]
    readiness: Probe | None
    liveness: Probe | None
    ingress: Ingress | None
    restart: RestartPolicy
    raw: dict[str, Any] = field(repr=False, compare=False)
    # SIGTERM-to-SIGKILL grace when the agent stops this generation's process group; None: the agent's.
    stop_grace_s: float | None = None

    @classmethod
    def parse(cls, data: Any, where: str = "workload") -> Generation:
        if not isinstance(data, dict):
            raise MessageInvalid("must be an object", field_path=where)
        generation_id = _str(data, "generation_id", where) or ""
        workload = _str(data, "workload", where) or ""
        if not all(c.isalnum() or c in "-_" for c in workload) or workload.startswith("-"):
            raise MessageInvalid("must be a slug (letters, digits, '-', '_')", field_path=f"{where}.workload")
        if "/" in generation_id or generation_id in (".", ".."):
            raise MessageInvalid("must not contain '/'", field_path=f"{where}.generation_id")
        bundle = data.get("bundle")
        if not isinstance(bundle, dict):
            raise MessageInvalid("must be an object", field_path=f"{where}.bundle")
        digest = _str(bundle, "digest", f"{where}.bundle") or ""
        if not digest.startswith("sha256:") or len(digest) != 71:
            raise MessageInvalid("must be 'sha256:<64 hex>'", field_path=f"{where}.bundle.digest")
        size = bundle.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise MessageInvalid("must be a non-negative integer", field_path=f"{where}.bundle.size")
        secrets_mode = data.get("secrets_mode", "env")
        if secrets_mode not in ("env", "file"):
            raise MessageInvalid("must be 'env' or 'file'", field_path=f"{where}.secrets_mode")
        probes = data.get("probes") or {}
        if not isinstance(probes, dict):
            raise MessageInvalid("must be an object", field_path=f"{where}.probes")
        ingress_raw = data.get("ingress")
        ingress = None
        if ingress_raw is not None:
            if not isinstance(ingress_raw, dict):
                raise MessageInvalid("must be an object", field_path=f"{where}.ingress")
            names = ingress_raw.get("hostnames")
            if names is None and ingress_raw.get("server_name"):
                # An older Host's single `server_name` is one host name.
                names = [ingress_raw["server_name"]]
            if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
                raise MessageInvalid("must be a non-empty list of host names",
                                     field_path=f"{where}.ingress.hostnames")
            ingress = Ingress(
                hostnames=tuple(names),
                port=_port(ingress_raw.get("port"), f"{where}.ingress.port"),
                path_prefix=_str(ingress_raw, "path_prefix", f"{where}.ingress", required=False) or "/",
            )
        restart_raw = data.get("restart") or {}
        if not isinstance(restart_raw, dict):
            raise MessageInvalid("must be an object", field_path=f"{where}.restart")
        restart = RestartPolicy(
            backoff_initial_s=float(_num(restart_raw, "backoff_initial_s", 1.0, f"{where}.restart")),
            backoff_max_s=float(_num(restart_raw, "backoff_max_s", 60.0, f"{where}.restart")),
            crash_loop_after=_int(restart_raw, "crash_loop_after", f"{where}.restart", 5, minimum=1),
        )
        if restart.backoff_max_s < restart.backoff_initial_s:
            raise MessageInvalid("must be >= backoff_initial_s", field_path=f"{where}.restart.backoff_max_s")
        ports = data.get("ports") or []
        if not isinstance(ports, list):
            raise MessageInvalid("must be a list", field_path=f"{where}.ports")
        for index, port in enumerate(ports):
            if not isinstance(port, dict):
                raise MessageInvalid("must be an object", field_path=f"{where}.ports[{index}]")
            _port(port.get("port"), f"{where}.ports[{index}].port")
        stop_grace_s = None
        if data.get("stop_grace_s") is not None:
            stop_grace_s = float(_num(data, "stop_grace_s", 0.0, where))
            if stop_grace_s > MAX_STOP_GRACE_S:
                raise MessageInvalid(f"must be at most {MAX_STOP_GRACE_S}",
                                     field_path=f"{where}.stop_grace_s")
        return cls(
            stop_grace_s=stop_grace_s,
            generation_id=generation_id,
            workload=workload,
            generation=_int(data, "generation", where, 0),
            bundle=BundleRef(
                url=_str(bundle, "url", f"{where}.bundle") or "",
                digest=digest.lower(),
                size=size,
                signature=_str(bundle, "signature", f"{where}.bundle") or "",
                key_id=_str(bundle, "key_id", f"{where}.bundle") or "",
            ),
            command=_argv(data.get("command"), f"{where}.command"),
            env=_str_map(data.get("env"), f"{where}.env"),
            secrets=_str_map(data.get("secrets"), f"{where}.secrets"),
            secrets_mode=secrets_mode,
            ports=ports,
            readiness=Probe.parse(probes["readiness"], f"{where}.probes.readiness")
            if probes.get("readiness")
            else None,
            liveness=Probe.parse(probes["liveness"], f"{where}.probes.liveness")
            if probes.get("liveness")
            else None,
            ingress=ingress,
            restart=restart,
            raw=data,
        )


def _num(data: dict[str, Any], key: str, default: float, where: str) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise MessageInvalid("must be a positive number", field_path=f"{where}.{key}")
    return value


@dataclass(frozen=True)
class Changes:
    jobs: list[dict[str, Any]]
    workloads: list[dict[str, Any]]
    cancel: list[str]


def parse_changes(data: dict[str, Any]) -> Changes:
    """Split a `changes` answer; items are parsed one by one later so one bad item spoils nothing."""
    jobs = data.get("jobs") or []
    workloads = data.get("workloads") or []
    cancel = data.get("cancel") or []
    if not isinstance(jobs, list) or not isinstance(workloads, list) or not isinstance(cancel, list):
        raise MessageInvalid("jobs, workloads and cancel must be lists", field_path="changes")
    return Changes(jobs=jobs, workloads=workloads, cancel=[str(c) for c in cancel])
