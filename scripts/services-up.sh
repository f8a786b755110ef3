#!/usr/bin/env bash
# Make sure what the test suite talks to is running: PostgreSQL and Redis on 127.0.0.1, and the Debian
# packages real-component tests use (nginx, chromium for Playwright, docker-registry: the CNCF distribution
# registry for the OCI tests; systemd for `systemd-analyze verify`). Idempotent; quiet when all is up.
set -euo pipefail

need_pkgs=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_pkgs+=(nginx)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
[ -x /usr/bin/docker-registry ] || need_pkgs+=(docker-registry)
command -v systemd-analyze >/dev/null 2>&1 || need_pkgs+=(systemd)  # verifies forest-agent's unit
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian packages: ${need_pkgs[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "missing Debian packages (run as root to install): ${need_pkgs[*]}" >&2
  fi
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
