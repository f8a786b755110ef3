"""`forest-controller`: enroll a Kubernetes cluster as a Grove, run its reconcile loop, render a job
offline, print the inventory. Installed with `pip install 'forest-agent[kubernetes]'`.

Errors print one line (`forest-controller: error: <code>: <sentence>`) and exit 2 (configuration),
3 (Host refused) or 4 (Host or the API server unreachable), like `forest-agent`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from forest_agent.clikit import (
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
from forest_agent.kube.identity import SecretIdentity
from forest_agent.kube.leader import LeaderElector, LeaseSettings, default_identity, run_as_leader
from forest_agent.kube.render import RenderConfig, render
from forest_agent.kube.spec import parse_job
from forest_agent.kube.validate import KUBERNETES_VERSION, validate_all
from forest_agent.logring import LogRing, Redactor
from forest_agent.state import Identity, StateDir
from forest_agent.wire.client import WireClient, api_base_url

log = logging.getLogger("forest_agent.kube.cli")

STATE_DIR_ENV = "FOREST_CONTROLLER_STATE_DIR"
TOKEN_ENV = "FOREST_CONTROLLER_ENROLL_TOKEN"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
LOG_LEVEL_ENV = "FOREST_CONTROLLER_LOG_LEVEL"


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
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=os.environ.get(LOG_LEVEL_ENV, "").lower() == "debug",
        help=f"debug logging (also ${LOG_LEVEL_ENV}=debug: the chart sets it from controller.log_level)",
    )
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
    election = run.add_argument_group(
        "leader election and in-cluster identity (the Helm chart sets these; docs/deploy.md)"
    )
    election.add_argument(
        "--leader-elect",
        action="store_true",
        help="take a coordination.k8s.io Lease before claiming or applying anything; other replicas wait",
    )
    election.add_argument(
        "--lease-name", default="forest-controller", help="Lease name (default forest-controller)"
    )
    election.add_argument(
        "--lease-namespace",
        default=None,
        help=f"namespace of the Lease and the identity Secret (default ${POD_NAMESPACE_ENV})",
    )
    election.add_argument("--lease-duration", type=positive_int, default=15, metavar="SECONDS",
                          help="how long a silent leader keeps the Lease (default 15)")
    election.add_argument("--renew-deadline", type=positive_float, default=10.0, metavar="SECONDS",
                          help="a leader that could not renew for this long stops acting (default 10)")
    election.add_argument("--retry-period", type=positive_float, default=2.0, metavar="SECONDS",
                          help="how often to renew, or to try to take the Lease (default 2)")
    election.add_argument(
        "--identity-secret",
        default=None,
        metavar="NAME",
        help="keep the Grove identity in this Secret instead of the state directory; when it is empty the "
        "leader enrolls with --host, --name and the token in --token-file (or $" + TOKEN_ENV + ")",
    )
    election.add_argument("--host", help="Host URL, to enroll into an empty identity Secret")
    election.add_argument("--name", help="Grove name, to enroll into an empty identity Secret")
    election.add_argument("--token-file", type=Path, help="file holding the one-time enrollment token")
    placement.add_argument(
        "--no-apply-namespaces",
        dest="apply_namespaces",
        action="store_false",
        help="the untrusted namespace and its deny-all NetworkPolicy are installed by the Helm chart: "
        "do not apply them (no cluster-scoped write permission needed)",
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


def _platforms(cluster: Cluster) -> list[str]:
    """The platforms of the cluster's Nodes (kubernetes.io/os and /arch labels), first seen first."""
    platforms: list[str] = []
    nodes, _ = cluster.list("Node")
    for node in nodes:
        platform = inventory.node_platform(node)
        if platform and platform not in platforms:
            platforms.append(platform)
    if not platforms:
        raise ConfigError("the cluster has no Nodes with kubernetes.io/os and /arch; pass --platform")
    return platforms


def cmd_enroll(args: argparse.Namespace, redactor: Redactor) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise ConfigError(f"enroll needs --token or ${TOKEN_ENV}")
    redactor.add([token])
    try:
        api = api_base_url(args.host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    platforms = list(args.platform) or _platforms(_cluster(args))
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


def _controller_config(args: argparse.Namespace) -> ControllerConfig:
    return ControllerConfig(
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
        apply_namespaces=args.apply_namespaces,
        data_image=args.data_image,
        data_command=tuple(args.data_command.split()),
    )


def _secret_identity(
    args: argparse.Namespace, cluster: Cluster, namespace: str, redactor: Redactor
) -> Identity:
    """The identity from the Secret; while it is empty, enroll now (only a leader gets here) and store it."""
    store = SecretIdentity(api_client=cluster.api_client, name=args.identity_secret, namespace=namespace)
    identity = store.load()
    if identity is not None:
        # The ConfigMap's host.url wins over the stored one, so a changed URL rolls out with the pods.
        return dataclasses.replace(identity, host_url=args.host) if args.host else identity
    token = os.environ.get(TOKEN_ENV) or ""
    if args.token_file and args.token_file.is_file():
        token = args.token_file.read_text().strip() or token
    if not (token and args.host and args.name):
        raise ConfigError(f"Secret {namespace}/{args.identity_secret} holds no identity yet; enrolling needs "
                          f"--host, --name and an enrollment token (--token-file or ${TOKEN_ENV})")
    redactor.add([token])
    try:
        api_base_url(args.host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    platforms = _platforms(cluster)
    log.info("enrolling %s (%s) with %s", args.name, ", ".join(platforms), args.host)
    with WireClient(args.host) as wire:
        answer = wire.enroll(token=token, name=args.name, platforms=platforms, version=VERSION,
                             substrate="kubernetes")
    identity = Identity(grove_id=answer["grove_id"], credential=answer["credential"], host_url=args.host,
                        name=args.name)
    store.save(identity)
    log.info("enrolled as Grove %s; identity stored in Secret %s/%s", identity.grove_id, namespace,
             args.identity_secret)
    return identity


def _run_controller(args: argparse.Namespace, ring: LogRing, cluster: Cluster, identity: Identity,
                    stop: threading.Event, may_act: Callable[[], bool] | None = None) -> int:
    ring.redactor.add([identity.credential])
    wire = WireClient(identity.host_url, credential=identity.credential, grove_id=identity.grove_id)
    controller = Controller(wire=wire, cluster=cluster, grove_id=identity.grove_id,
                            config=_controller_config(args), ring=ring,
                            stop_event=stop, may_act=may_act)  # one stop: signals and a lost lease
    return controller.run()


def cmd_run(args: argparse.Namespace, ring: LogRing) -> int:
    stop = threading.Event()
    stop_on_signals(stop)
    if not args.leader_elect and not args.identity_secret:
        state = _state(args)
        state.acquire_lock()  # one controller per Grove without leader election: the claim logic relies on it
        try:
            return _run_controller(args, ring, _cluster(args), state.load_identity(), stop)
        finally:
            state.release_lock()
    namespace = args.lease_namespace or os.environ.get(POD_NAMESPACE_ENV)
    if not namespace:
        raise ConfigError(
            f"--leader-elect and --identity-secret need --lease-namespace or ${POD_NAMESPACE_ENV}"
        )
    cluster = _cluster(args)

    def lead(may_act: Callable[[], bool] | None) -> int:
        identity = (_secret_identity(args, cluster, namespace, ring.redactor) if args.identity_secret
                    else _state(args).load_identity())
        return _run_controller(args, ring, cluster, identity, stop, may_act)

    if not args.leader_elect:
        return lead(None)
    settings = LeaseSettings(
        name=args.lease_name,
        namespace=namespace,
        identity=default_identity(),
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
    )
    elector = LeaderElector(api_client=cluster.api_client, settings=settings)
    return run_as_leader(elector, stop, lambda: lead(elector.is_leader))


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
