"""`forest-agent`: enroll, run, status, inventory.

Every command takes `--state-dir DIR` (default per platform, or FOREST_AGENT_STATE_DIR).
Every misconfiguration prints one line (`forest-agent: error: <code>: <sentence>`) and exits
non-zero: 2 for configuration, 3 when Host refuses, 4 when Host cannot be reached.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Any

from forest_agent import __version__
from forest_agent.agent import Agent, AgentConfig, change_kinds
from forest_agent.clikit import (
    add_wire_timing,
    positive_float,
    positive_int,
    run_command,
    stop_on_signals,
)
from forest_agent.errors import ConfigError
from forest_agent.inventory import capacity_report, collect_accelerators
from forest_agent.logring import LogRing, Redactor
from forest_agent.native.signing import TrustedKeys
from forest_agent.oskit import CommandRunner, machine_platform
from forest_agent.state import STATE_DIR_ENV, Identity, StateDir, default_state_dir
from forest_agent.wire.client import WireClient, WireError, api_base_url

TOKEN_ENV = "FOREST_AGENT_ENROLL_TOKEN"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"agent state directory (identity, journal, generations); default ${STATE_DIR_ENV} "
        f"or {default_state_dir()}",
    )
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    parser = argparse.ArgumentParser(
        prog="forest-agent",
        description="Forest's native Grove agent: reports this machine's capacity to Host and runs "
        "native jobs and workloads that Host places on it.",
        epilog="Start with `forest-agent enroll --host URL --token TOKEN`, then `forest-agent run`.",
    )
    parser.add_argument("--version", action="version", version=f"forest-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    enroll = sub.add_parser(
        "enroll",
        parents=[common],
        help="enroll this machine as a Grove (one-time token)",
        description="Exchange a one-time enrollment token for a Grove id and credential, "
        "stored (mode 0600) in the state directory.",
    )
    enroll.add_argument(
        "--host", required=True, help="Host URL, e.g. https://forest.example (or its API root)"
    )
    enroll.add_argument("--token", help=f"one-time enrollment token (or ${TOKEN_ENV})")
    enroll.add_argument("--name", default=socket.gethostname(), help="Grove name (default: this host name)")
    enroll.add_argument("--force", action="store_true", help="replace an existing identity")

    run = sub.add_parser(
        "run",
        parents=[common],
        help="run the agent until SIGTERM/SIGINT",
        description="Heartbeat to Host, long-poll for work, run native jobs and workloads.",
    )
    modes = run.add_argument_group("execution modes (both off by default)")
    modes.add_argument(
        "--enable-native-jobs", action="store_true", help="run native jobs (advertises native.job)"
    )
    modes.add_argument(
        "--enable-native-workloads",
        action="store_true",
        help="run native workloads from signed bundles (advertises native.workload)",
    )
    bundles = run.add_argument_group("bundles")
    bundles.add_argument(
        "--trusted-keys-dir",
        type=Path,
        help="directory of Ed25519 public keys; each file's stem is its key id",
    )
    bundles.add_argument(
        "--trusted-key",
        action="append",
        default=[],
        metavar="KEY_ID=PATH",
        help="one trusted Ed25519 public key (repeatable)",
    )
    bundles.add_argument(
        "--max-bundle-bytes",
        type=positive_int,
        default=1024**3,
        help="largest bundle download accepted (default 1 GiB)",
    )
    bundles.add_argument(
        "--max-extract-bytes",
        type=positive_int,
        default=4 * 1024**3,
        help="largest total extracted size (default 4 GiB)",
    )
    bundles.add_argument(
        "--max-bundle-files",
        type=positive_int,
        default=100_000,
        help="most entries in one bundle (default 100000)",
    )
    ingress = run.add_argument_group("ingress (nginx)")
    ingress.add_argument(
        "--nginx-conf-dir",
        type=Path,
        help="directory nginx includes (`include DIR/*.conf;`) for workload server blocks",
    )
    ingress.add_argument("--nginx-binary", default="nginx", help="nginx executable (default: nginx)")
    ingress.add_argument("--nginx-config", type=Path, help="nginx main config passed as -c")
    ingress.add_argument("--nginx-prefix", type=Path, help="nginx prefix passed as -p")
    ingress.add_argument("--mesh-address", help="this machine's mesh (WireGuard) IP address")
    ingress.add_argument("--mesh-interface", help="read the mesh address from this interface (e.g. wg0)")
    ingress.add_argument("--proxy-port", type=positive_int,
                         help="ingress proxy port on the mesh address (the edge sends plain HTTP here)")
    ingress.add_argument("--mesh-allow", action="append", default=[], metavar="CIDR",
                         help="mesh range the proxy accepts from (repeatable; default: its network)")
    ingress.add_argument("--edge-address", action="append", default=[], metavar="IP",
                         help="Host edge address the proxy accepts from (repeatable)")
    timing = run.add_argument_group("timing")
    add_wire_timing(timing)
    timing.add_argument(
        "--kill-grace",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="SIGTERM-to-SIGKILL grace for cancelled/timed-out jobs and stopped workloads",
    )

    status = sub.add_parser("status", parents=[common], help="identity, Host reachability, jobs, generations")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    sub.add_parser(
        "inventory", parents=[common], help="print the capacity and accelerators this agent would report"
    )
    return parser


def _state(args: argparse.Namespace) -> StateDir:
    path = args.state_dir or (Path(os.environ[STATE_DIR_ENV]) if os.environ.get(STATE_DIR_ENV) else None)
    # Absolute: job wrappers and workloads run in other working directories but write into it.
    return StateDir((path or default_state_dir()).expanduser().resolve())


def _say(message: str) -> None:
    print(message, flush=True)


# -- commands ----------------------------------------------------------------------------------
def cmd_enroll(args: argparse.Namespace, redactor: Redactor) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise ConfigError(f"enroll needs --token or ${TOKEN_ENV}")
    redactor.add([token])
    try:
        api = api_base_url(args.host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    state = _state(args)
    state.acquire_lock()
    try:
        if state.identity_path.exists() and not args.force:
            existing = state.load_identity()
            raise ConfigError(
                f"{state.path} is already enrolled as Grove {existing.grove_id}; pass --force to enroll again"
            )
        platform = machine_platform()
        _say(f"enrolling {args.name} ({platform}) with {api} ...")
        with WireClient(args.host) as wire:
            answer = wire.enroll(token=token, name=args.name, platforms=[platform], version=__version__)
        state.save_identity(
            Identity(
                grove_id=answer["grove_id"],
                credential=answer["credential"],
                host_url=args.host,
                name=args.name,
            )
        )
        _say(f"enrolled as Grove {answer['grove_id']}; identity saved to {state.identity_path}")
        _say("next: forest-agent run [--enable-native-jobs] [--enable-native-workloads]")
        return 0
    finally:
        state.release_lock()


def _config(args: argparse.Namespace) -> AgentConfig:
    if args.nginx_conf_dir is not None and not args.nginx_conf_dir.is_dir():
        raise ConfigError(f"--nginx-conf-dir {args.nginx_conf_dir} is not a directory")
    if args.nginx_config is not None and not args.nginx_config.is_file():
        raise ConfigError(f"--nginx-config {args.nginx_config} is not a file")
    if args.nginx_conf_dir is None and (args.nginx_config or args.nginx_prefix):
        raise ConfigError("--nginx-config/--nginx-prefix need --nginx-conf-dir")
    if args.mesh_address and args.mesh_interface:
        raise ConfigError("give --mesh-address or --mesh-interface, not both")
    if args.proxy_port is not None and not (args.mesh_address or args.mesh_interface):
        raise ConfigError("--proxy-port needs --mesh-address or --mesh-interface")
    if args.proxy_port is not None and args.mesh_address and not (args.mesh_allow or args.edge_address):
        raise ConfigError("--proxy-port with --mesh-address needs --mesh-allow CIDR or --edge-address IP")
    for value in args.mesh_allow + args.edge_address:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ConfigError(f"{value!r} is not an IP address or network") from None
    return AgentConfig(
        enable_native_jobs=args.enable_native_jobs,
        enable_native_workloads=args.enable_native_workloads,
        heartbeat_interval_s=args.heartbeat_interval,
        poll_wait_s=args.poll_wait,
        backoff_max_s=max(args.backoff_max, 1.0),
        kill_grace_s=args.kill_grace,
        trusted_keys_dir=args.trusted_keys_dir,
        trusted_key_flags=args.trusted_key,
        max_bundle_bytes=args.max_bundle_bytes,
        max_extract_bytes=args.max_extract_bytes,
        max_bundle_files=args.max_bundle_files,
        nginx_conf_dir=args.nginx_conf_dir,
        nginx_binary=args.nginx_binary,
        nginx_config=args.nginx_config,
        nginx_prefix=args.nginx_prefix,
        mesh_address=args.mesh_address,
        mesh_interface=args.mesh_interface,
        proxy_port=args.proxy_port,
        mesh_allow=args.mesh_allow,
        edge_addresses=args.edge_address,
    )


def cmd_run(args: argparse.Namespace, ring: LogRing) -> int:
    config = _config(args)
    keys = TrustedKeys.load(keys_dir=config.trusted_keys_dir, key_flags=config.trusted_key_flags)
    if config.enable_native_workloads and not keys:
        raise ConfigError(
            "--enable-native-workloads needs at least one trusted key "
            "(--trusted-keys-dir or --trusted-key KEY_ID=PATH)"
        )
    state = _state(args)
    state.acquire_lock()
    try:
        identity = state.load_identity()
        ring.redactor.add([identity.credential])
        agent = Agent(config=config, state=state, identity=identity, ring=ring, keys=keys)
        stop_on_signals(agent.stop_event)
        return agent.run()
    finally:
        state.release_lock()


def cmd_status(args: argparse.Namespace) -> int:
    state = _state(args)
    identity = state.load_identity()
    holder = state.lock_holder()
    snapshot = state.read_status() if holder else None
    reach: dict[str, Any]
    try:
        with WireClient(
            identity.host_url, credential=identity.credential, grove_id=identity.grove_id, timeout_s=5.0
        ) as wire:
            wire.changes(wait_s=0)  # read-only: lists work, claims nothing
        reach = {"reachable": True, "detail": "ok"}
    except WireError as exc:
        reach = {"reachable": exc.status is not None, "detail": f"{exc.code}: {exc.detail}"}
    report = {
        "state_dir": str(state.path),
        "grove_id": identity.grove_id,
        "name": identity.name,
        "host_url": identity.host_url,
        "host": reach,
        "agent_running": bool(holder),
        "agent_pid": holder,
        "change_kinds": snapshot.get("change_kinds") if snapshot else [],
        "jobs": snapshot.get("jobs", []) if snapshot else [],
        "workloads": snapshot.get("workloads", []) if snapshot else [],
        "last_heartbeat_at": snapshot.get("last_heartbeat_at") if snapshot else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _say(f"Grove        {identity.grove_id} ({identity.name})")
    _say(f"state dir    {state.path}")
    _say(
        f"Host         {identity.host_url}: {'reachable' if reach['reachable'] else 'UNREACHABLE'} "
        f"({reach['detail']})"
    )
    _say(
        f"agent        {'running, pid ' + str(holder) if holder else 'not running'}"
        + (f"; advertises {', '.join(report['change_kinds']) or 'nothing'}" if holder else "")
    )
    _say(f"jobs         {len(report['jobs'])} running")
    for job in report["jobs"]:
        _say(f"  {job['job_id']}  {job['state']}")
    _say(f"generations  {len(report['workloads'])}")
    for w in report["workloads"]:
        _say(
            f"  {w['workload']}  generation {w['generation']} ({w['generation_id']})  {w['state']}"
            f"{'  LIVE' if w['live'] else ''}  restarts {w['restarts']}"
        )
    return 0


def cmd_inventory(args: argparse.Namespace) -> int:
    platform = machine_platform()
    accelerators = collect_accelerators(CommandRunner(), platform)
    print(
        json.dumps(
            {
                "platform": platform,
                "isolation": ["host_process"],
                "change_kinds_when_enabled": change_kinds(
                    AgentConfig(enable_native_jobs=True, enable_native_workloads=True)
                ),
                "capacity": capacity_report(accelerators),
            },
            indent=2,
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command("forest-agent", build_parser, argv, {
        "enroll": lambda args, ring: cmd_enroll(args, ring.redactor),
        "run": cmd_run,
        "status": lambda args, ring: cmd_status(args),
        "inventory": lambda args, ring: cmd_inventory(args),
    })
