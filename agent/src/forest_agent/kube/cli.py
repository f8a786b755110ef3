"""`forest-controller`: enroll a Kubernetes cluster as a Grove, run its reconcile loop, render a job
offline, print the inventory. Installed with `pip install 'forest-agent[kubernetes]'`.

Errors print one line (`forest-controller: error: <code>: <sentence>`) and exit 2 (configuration),
3 (Host refused) or 4 (Host or the API server unreachable), like `forest-agent`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from forest_agent.cli import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    add_wire_timing,
    positive_float,
    positive_int,
    run_command,
    stop_on_signals,
)
from forest_agent.errors import ConfigError
from forest_agent.kube import inventory
from forest_agent.kube.cluster import Cluster, ClusterError, api_client_from
from forest_agent.kube.controller import VERSION, Controller, ControllerConfig
from forest_agent.kube.render import RenderConfig, render
from forest_agent.kube.spec import parse_job
from forest_agent.kube.validate import KUBERNETES_VERSION, validate_all
from forest_agent.logring import LogRing, Redactor
from forest_agent.state import Identity, StateDir
from forest_agent.wire.client import WireClient, api_base_url

STATE_DIR_ENV = "FOREST_CONTROLLER_STATE_DIR"
TOKEN_ENV = "FOREST_CONTROLLER_ENROLL_TOKEN"


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/forest-controller")
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "forest-controller"




def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"identity directory; default ${STATE_DIR_ENV} or {default_state_dir()}",
    )
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    kube = argparse.ArgumentParser(add_help=False)
    group = kube.add_argument_group("Kubernetes API")
    group.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
    group.add_argument("--context", help="kubeconfig context")
    group.add_argument("--in-cluster", action="store_true", help="use the Pod's service account")

    parser = argparse.ArgumentParser(
        prog="forest-controller",
        description="Forest's Kubernetes Grove controller: reports the cluster's capacity (Nodes, GPU "
        "Feature Discovery labels) to Host and runs the container jobs Host places on it as Jobs and "
        "Deployments (server-side apply, watched until they end).",
        epilog="Start with `forest-controller enroll --host URL --token TOKEN`, "
        "then `forest-controller run`.",
    )
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    enroll = sub.add_parser(
        "enroll",
        parents=[common, kube],
        help="enroll this cluster as a Grove",
        description="Exchange a one-time token (substrate kubernetes) for a Grove id "
        "and credential, stored 0600 in the state directory. Platforms come from the "
        "Nodes' kubernetes.io/os and /arch labels unless --platform is given.",
    )
    enroll.add_argument("--host", required=True, help="Host URL, e.g. https://forest.example")
    enroll.add_argument("--token", help=f"one-time enrollment token (or ${TOKEN_ENV})")
    enroll.add_argument("--name", required=True, help="Grove name")
    enroll.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="OS/ARCH",
        help="platform this cluster runs (repeatable; order is preference)",
    )
    enroll.add_argument("--force", action="store_true", help="replace an existing identity")

    run = sub.add_parser(
        "run",
        parents=[common, kube],
        help="run the reconcile loop until SIGTERM/SIGINT",
        description="Heartbeat the cluster's capacity, long-poll Host, apply Jobs and "
        "Deployments, watch them and report their outcome.",
    )
    placement = run.add_argument_group("placement")
    placement.add_argument("--namespace", default="forest", help="namespace of trusted work (default forest)")
    placement.add_argument(
        "--untrusted-namespace",
        default="forest-untrusted",
        help="namespace of untrusted work, Pod Security 'restricted' (default forest-untrusted)",
    )
    placement.add_argument(
        "--runtime-class", default="nvidia", help="RuntimeClass of GPU pods (default nvidia)"
    )
    placement.add_argument(
        "--gpu-taint",
        action="append",
        default=None,
        metavar="KEY",
        help="taint key GPU pods tolerate (repeatable; default nvidia.com/gpu)",
    )
    step_data = run.add_argument_group("step data")
    step_data.add_argument(
        "--data-image",
        default="ghcr.io/forest/forest-controller:latest",
        help="image of the pods' data containers (holds forest_agent; default the controller's own)",
    )
    step_data.add_argument(
        "--data-command",
        default="python -m forest_agent.data",
        help="how the data containers run forest_agent.data (split on spaces)",
    )
    timing = run.add_argument_group("timing")
    add_wire_timing(timing)
    timing.add_argument(
        "--watch-timeout",
        type=positive_int,
        default=60,
        metavar="SECONDS",
        help="server-side timeout of each watch (the client waits 10 s longer)",
    )
    timing.add_argument(
        "--resync",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="reconcile every tracked job this often, whatever the watches said",
    )
    timing.add_argument(
        "--pending-grace",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long a pod may stay unschedulable or fail to pull before the job fails",
    )
    timing.add_argument(
        "--workers",
        type=positive_int,
        default=4,
        help="jobs reconciled in parallel (one worker per job at a time; default 4)",
    )

    rend = sub.add_parser(
        "render",
        parents=[common],
        help="render and validate one job (JSON) as YAML",
        description=f"Print the objects a Grove job becomes, validated against the "
        f"Kubernetes {KUBERNETES_VERSION} schemas; no cluster or Host needed.",
    )
    rend.add_argument("job", type=Path, help="a job as Host sends it in `changes` (JSON file, - for stdin)")
    rend.add_argument("--grove-id", default="grove", help="Grove id for the labels")
    rend.add_argument("--namespace", default="forest")
    rend.add_argument("--untrusted-namespace", default="forest-untrusted")
    rend.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="INVENTORY_ID=PRODUCT",
        help="GFD product of a claimed inventory id (for the product constraint)",
    )

    sub.add_parser(
        "inventory", parents=[common, kube], help="print the capacity report this cluster would send"
    )
    return parser


def _state(args: argparse.Namespace) -> StateDir:
    path = args.state_dir or (Path(os.environ[STATE_DIR_ENV]) if os.environ.get(STATE_DIR_ENV) else None)
    return StateDir((path or default_state_dir()).expanduser().resolve())


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(
        api_client_from(
            kubeconfig=args.kubeconfig, context=args.context, in_cluster=True if args.in_cluster else None
        )
    )


def cmd_enroll(args: argparse.Namespace, redactor: Redactor) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise ConfigError(f"enroll needs --token or ${TOKEN_ENV}")
    redactor.add([token])
    try:
        api = api_base_url(args.host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    platforms = list(args.platform)
    if not platforms:
        nodes, _ = _cluster(args).list("Node")
        for node in nodes:
            platform = inventory.node_platform(node)
            if platform and platform not in platforms:
                platforms.append(platform)
        if not platforms:
            raise ConfigError("the cluster has no Nodes with kubernetes.io/os and /arch; pass --platform")
    state = _state(args)
    state.acquire_lock()
    try:
        if state.identity_path.exists() and not args.force:
            raise ConfigError(
                f"{state.path} is already enrolled as Grove {state.load_identity().grove_id}; "
                "pass --force to enroll again"
            )
        print(f"enrolling {args.name} ({', '.join(platforms)}) with {api} ...", flush=True)
        with WireClient(args.host) as wire:
            answer = wire.enroll(
                token=token, name=args.name, platforms=platforms, version=VERSION, substrate="kubernetes"
            )
        state.save_identity(
            Identity(
                grove_id=answer["grove_id"],
                credential=answer["credential"],
                host_url=args.host,
                name=args.name,
            )
        )
        print(f"enrolled as Grove {answer['grove_id']}; identity saved to {state.identity_path}", flush=True)
        return 0
    finally:
        state.release_lock()


def cmd_run(args: argparse.Namespace, ring: LogRing) -> int:
    state = _state(args)
    state.acquire_lock()  # one controller per Grove: the claim logic relies on it
    try:
        identity = state.load_identity()
        ring.redactor.add([identity.credential])
        config = ControllerConfig(
            namespace=args.namespace,
            untrusted_namespace=args.untrusted_namespace,
            runtime_class=args.runtime_class,
            gpu_taint_keys=tuple(args.gpu_taint or ("nvidia.com/gpu",)),
            heartbeat_interval_s=args.heartbeat_interval,
            poll_wait_s=args.poll_wait,
            watch_timeout_s=args.watch_timeout,
            resync_s=args.resync,
            pending_grace_s=max(0.0, args.pending_grace),
            backoff_max_s=max(args.backoff_max, 1.0),
            workers=args.workers,
            data_image=args.data_image,
            data_command=tuple(args.data_command.split()),
        )
        wire = WireClient(identity.host_url, credential=identity.credential, grove_id=identity.grove_id)
        controller = Controller(
            wire=wire, cluster=_cluster(args), grove_id=identity.grove_id, config=config, ring=ring
        )
        stop_on_signals(controller.stop_event)
        return controller.run()
    finally:
        state.release_lock()


def cmd_render(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if str(args.job) == "-" else args.job.read_text()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{args.job} is not JSON: {exc}") from None
    models = dict(item.split("=", 1) for item in args.model if "=" in item)
    spec = parse_job(raw, models=models)
    config = RenderConfig(
        grove_id=args.grove_id, namespace=args.namespace, untrusted_namespace=args.untrusted_namespace
    )
    objects = validate_all(render(spec, config))
    print(to_yaml(objects), end="")
    return 0


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """The golden form: one YAML document per object, keys in rendered order."""
    return "".join(
        "---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects
    )


def cmd_inventory(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    nodes, _ = cluster.list("Node")
    pods, _ = cluster.list("Pod")
    print(
        json.dumps(
            {
                "platforms": sorted({p for n in nodes if (p := inventory.node_platform(n))}),
                "capacity": inventory.capacity(nodes, pods),
            },
            indent=2,
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command("forest-controller", build_parser, argv, {
        "enroll": lambda args, ring: cmd_enroll(args, ring.redactor),
        "run": cmd_run,
        "render": lambda args, ring: cmd_render(args),
        "inventory": lambda args, ring: cmd_inventory(args),
    }, exit_rules=((ClusterError, lambda exc: EXIT_UNREACHABLE if exc.retryable else EXIT_REFUSED),))
