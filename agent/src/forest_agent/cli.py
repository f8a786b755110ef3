"""`forest-agent`: enroll, run, status, inventory; install, upgrade, uninstall (as a service).

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
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from forest_agent import __version__, service
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
        help="SIGTERM-to-SIGKILL grace for cancelled/timed-out jobs, and for stopped workloads whose "
        "generation declares no stop_grace_s",
    )
    run.add_argument(
        "--leave-workloads-running",
        action="store_true",
        help="when the agent stops, leave native workloads running (the next agent adopts them); by "
        "default the agent stops every workload's process group, even when it is killed itself",
    )

    status = sub.add_parser("status", parents=[common], help="identity, Host reachability, jobs, generations")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    sub.add_parser(
        "inventory", parents=[common], help="print the capacity and accelerators this agent would report"
    )
    _add_service_commands(sub, common)
    return parser


def _add_service_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--platform", choices=("linux", "darwin"), default=_this_platform(),
                       help="render the systemd unit (linux) or the launchd plist (darwin); "
                       "default this machine")
    where.add_argument("--root", type=Path, default=None,
                       help="relocate every file under DIR (packaging, tests); service-manager commands are "
                       "printed, not run")
    where.add_argument("--dry-run", action="store_true",
                       help="print what would be written and run; change nothing")

    install = sub.add_parser(
        "install", parents=[common, where],
        help="enroll and install the agent as a service (systemd, launchd)",
        description="Enroll this machine, then install forest-agent as a service: on Linux a hardened "
        "systemd unit run by a dedicated system user, on macOS a per-user launchd LaunchAgent. "
        "Arguments after `--` are passed to `forest-agent run`.",
    )
    install.add_argument("--host", required=True, help="Host URL, e.g. https://forest.example")
    install.add_argument("--token-file", type=Path, required=True,
                         help="file holding the one-time enrollment token (kept out of ps and shell history)")
    install.add_argument("--name", default=socket.gethostname(), help="Grove name (default: this host name)")
    install.add_argument("--user", default=service.SERVICE_USER,
                         help=f"Linux: the system user the service runs as (default {service.SERVICE_USER}; "
                         "created if missing)")
    install.add_argument("--sandbox", choices=service.SANDBOX_CHOICES, default="strict",
                         help="Linux: `off` drops the unit's hardening for native jobs that need more "
                         "(capabilities, setuid tools, writing outside the state directory)")
    install.add_argument("--writable", action="append", default=[], metavar="PATH",
                         help="Linux: another path the sandboxed service may write (repeatable)")
    install.add_argument("--leave-workloads-running", action="store_true",
                         help="workloads outlive the agent's stop (passed to run; the service manager "
                         "is told not to kill them either)")
    install.add_argument("--stop-timeout", type=positive_int, default=service.DEFAULT_STOP_TIMEOUT_S,
                         metavar="SECONDS",
                         help="how long the service manager waits after SIGTERM before SIGKILL (default 90)")
    install.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN_ARGS",
                         help="options for `forest-agent run`, e.g. -- --enable-native-jobs")

    sub.add_parser(
        "upgrade", parents=[common, where],
        help="re-install the service for the installed program; keeps identity",
        description="After installing a newer forest-agent package, rewrite the service file with the same "
        "settings for the new program and restart it. The identity and the workloads' generations stay "
        "in the state directory; the restarted agent brings the generations back.",
    )
    uninstall = sub.add_parser(
        "uninstall", parents=[common, where],
        help="stop and remove the service (keeps identity unless --purge)",
    )
    uninstall.add_argument("--purge", action="store_true",
                           help="also delete the state directory (identity, workloads) and the service user")


def _this_platform() -> str:
    return "darwin" if sys.platform == "darwin" else "linux"


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
    _enroll(state=_state(args), host=args.host, token=token, name=args.name, force=args.force,
            redactor=redactor)
    _say("next: forest-agent run [--enable-native-jobs] [--enable-native-workloads]")
    return 0


def _enroll(*, state: StateDir, host: str, token: str, name: str, force: bool,
            redactor: Redactor) -> Identity:
    """Exchange the token for an identity in `state`; an existing identity is refused unless `force`."""
    redactor.add([token])
    try:
        api = api_base_url(host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    state.acquire_lock()
    try:
        if state.identity_path.exists() and not force:
            existing = state.load_identity()
            raise ConfigError(
                f"{state.path} is already enrolled as Grove {existing.grove_id}; "
                "pass --force to enroll again",
                code="already_enrolled",
            )
        platform = machine_platform()
        _say(f"enrolling {name} ({platform}) with {api} ...")
        with WireClient(host) as wire:
            answer = wire.enroll(token=token, name=name, platforms=[platform], version=__version__)
        identity = Identity(grove_id=answer["grove_id"], credential=answer["credential"], host_url=host,
                            name=name)
        state.save_identity(identity)
        _say(f"enrolled as Grove {answer['grove_id']}; identity saved to {state.identity_path}")
        return identity
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
        leave_workloads_running=args.leave_workloads_running,
    )


def _trusted_keys(config: AgentConfig) -> TrustedKeys:
    keys = TrustedKeys.load(keys_dir=config.trusted_keys_dir, key_flags=config.trusted_key_flags)
    if config.enable_native_workloads and not keys:
        raise ConfigError(
            "--enable-native-workloads needs at least one trusted key "
            "(--trusted-keys-dir or --trusted-key KEY_ID=PATH)"
        )
    return keys


def cmd_run(args: argparse.Namespace, ring: LogRing) -> int:
    config = _config(args)
    keys = _trusted_keys(config)
    state = _state(args)
    state.acquire_lock()
    try:
        identity = state.load_identity()
        ring.redactor.add([identity.credential])
        agent = Agent(config=config, state=state, identity=identity, ring=ring, keys=keys)
        stop_on_signals(agent.stop_event, hurry=agent.hurry_event)
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
        "service": _service_status(state),
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
    if report["service"]:
        _say(f"service      {report['service']['file']} ({report['service']['state']})")
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


def _service_state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir or os.environ.get(STATE_DIR_ENV):
        return _state(args).path
    layout = service.Layout(args.platform, root=(args.root or Path("/")).resolve())
    return layout.state_dir


def _service_ops(args: argparse.Namespace) -> service.ServiceOps:
    return service.PrintOps(_say) if (args.root is not None or args.dry_run) else service.ServiceOps(_say)


def _run_args(raw: list[str], leave_running: bool) -> tuple[list[str], argparse.Namespace]:
    """`forest-agent run`'s options for the service, checked now by run's own parser and rules."""
    run_args = raw[1:] if raw[:1] == ["--"] else list(raw)
    if leave_running and "--leave-workloads-running" not in run_args:
        run_args.append("--leave-workloads-running")
    if any(a == "--state-dir" or a.startswith("--state-dir=") for a in run_args):
        raise ConfigError("give --state-dir to install itself, not after --", code="service_run_args_invalid")
    try:
        parsed = build_parser().parse_args(["run", *run_args])
    except SystemExit:
        raise ConfigError(f"`forest-agent run {' '.join(run_args)}` is not valid (see the message above)",
                          code="service_run_args_invalid") from None
    _trusted_keys(_config(parsed))
    return run_args, parsed


def cmd_install(args: argparse.Namespace, redactor: Redactor) -> int:
    run_args, parsed = _run_args(args.run_args, args.leave_workloads_running)
    root = (args.root or Path("/")).resolve()
    layout = service.Layout(args.platform, root=root)
    state = StateDir(_service_state_dir(args))
    writable = [str(Path(p).resolve()) for p in args.writable]
    writable += [str(p.resolve()) for p in (parsed.nginx_conf_dir, parsed.nginx_prefix) if p is not None]
    settings = service.ServiceSettings(
        platform=args.platform,
        state_dir=str(state.path),
        run_args=run_args,
        program=service.agent_program(),
        unit_path=str(layout.unit_path),
        user=args.user if args.platform == "linux" else None,
        sandbox=args.sandbox,
        writable=writable,
        leave_workloads_running="--leave-workloads-running" in run_args,
        stop_timeout_s=args.stop_timeout,
        log_dir=str(layout.log_dir) if layout.log_dir else None,
    )
    keys = [str(parsed.trusted_keys_dir.resolve())] if parsed.trusted_keys_dir else []
    keys += [str(Path(flag.partition("=")[2]).resolve()) for flag in parsed.trusted_key]
    service.check_visible(settings, [settings.program[0], *keys])
    content = service.render(settings)
    ops = _service_ops(args)
    if args.dry_run:
        _say(f"would enroll {args.name} with {args.host} into {state.path}")
        _say(f"would write {settings.unit_path}:")
        print(content.decode(), flush=True)
        service.prepare_user(settings, ops)
        service.activate(settings, ops)
        return 0
    if args.platform == "linux" and args.root is None and os.geteuid() != 0:
        raise ConfigError("installing the systemd service needs root: run it with sudo",
                          code="service_needs_root")
    if args.platform == "darwin" and args.root is None and os.geteuid() == 0:
        raise ConfigError("the launchd LaunchAgent belongs to the user whose session it runs in: run install "
                          "without sudo, as that user", code="service_needs_user")
    if state.identity_path.exists():
        existing = state.load_identity()
        raise ConfigError(
            f"{state.path} is already enrolled as Grove {existing.grove_id}; `forest-agent upgrade` "
            "re-installs the service with this identity, `forest-agent uninstall --purge` forgets it",
            code="already_enrolled",
        )
    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"--token-file {args.token_file} is empty")
    _enroll(state=state, host=args.host, token=token, name=args.name, force=False, redactor=redactor)
    settings.save()
    if settings.log_dir:
        Path(settings.log_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    service.prepare_user(settings, ops)
    service.write_service_file(settings, content)
    _say(f"wrote {settings.unit_path}")
    service.activate(settings, ops)
    _report_installed(settings)
    _say(f"the token in {args.token_file} is spent; delete the file")
    return 0


def _report_installed(settings: service.ServiceSettings) -> None:
    _say(f"state (identity, jobs, workloads): {settings.state_dir}")
    if settings.platform == "darwin":
        _say(f"logs: {settings.log_dir}/agent.log and agent.err.log")
        _say(f"check: launchctl print {service.launchd_domain()}/{service.LAUNCHD_LABEL}; "
             "forest-agent status")
    else:
        _say(f"logs: journalctl -u {service.UNIT_NAME}")
        _say(f"check: systemctl status {service.UNIT_NAME}; "
             f"forest-agent status --state-dir {settings.state_dir}")


def cmd_upgrade(args: argparse.Namespace) -> int:
    state = StateDir(_service_state_dir(args))
    old = service.ServiceSettings.load(state.path)
    identity = state.load_identity()
    settings = replace(old, program=service.agent_program())
    service.check_visible(settings, [settings.program[0]])
    content = service.render(settings)
    ops = _service_ops(args)
    if args.dry_run:
        _say(f"would write {settings.unit_path}:")
        print(content.decode(), flush=True)
        service.activate(settings, ops)
        return 0
    settings.save()
    service.write_service_file(settings, content)
    _say(f"wrote {settings.unit_path} for forest-agent {__version__} ({settings.program[0]})")
    service.prepare_user(settings, ops)
    service.activate(settings, ops)
    _say(f"kept identity: Grove {identity.grove_id} ({identity.name}) in {state.path}; the restarted agent "
         "brings back each workload's current generation from there")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    state = StateDir(_service_state_dir(args))
    settings = service.ServiceSettings.load(state.path)
    ops = _service_ops(args)
    if args.dry_run:
        service.deactivate(settings, ops)
        _say(f"would remove {settings.unit_path}" + (f" and {settings.state_dir}" if args.purge else ""))
        return 0
    for path in service.remove(settings, ops, purge=args.purge):
        _say(f"removed {path}")
    if not args.purge:
        _say(f"kept {state.path} (identity, workloads): `forest-agent upgrade` re-installs the service "
             "with it, `forest-agent uninstall --purge` deletes it; retire the Grove on Host when it is "
             "gone for good")
    return 0


def _service_status(state: StateDir) -> dict[str, str] | None:
    """The installed service (service.json) and what its manager says of it; None when not installed."""
    try:
        settings = service.ServiceSettings.load(state.path)
    except ConfigError:
        return None
    try:
        running = service.is_active(settings, service.ServiceOps(_say))
    except ConfigError:
        running = "unknown"
    return {"file": settings.unit_path, "state": running}


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
        "install": lambda args, ring: cmd_install(args, ring.redactor),
        "upgrade": lambda args, ring: cmd_upgrade(args),
        "uninstall": lambda args, ring: cmd_uninstall(args),
    })
