#!/bin/sh
# Forest Host's container entrypoint: the first argument names the process (docs/deploy.md).
set -eu

role="${1:-web}"
[ "$#" -gt 0 ] && shift

case "$role" in
  web)
    # ASGI under uvicorn workers; the long-poll is async, so a few workers serve many Groves.
    exec uvicorn forest_host.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" \
      --workers "${WEB_CONCURRENCY:-2}" --proxy-headers --forwarded-allow-ips "${FORWARDED_ALLOW_IPS:-*}" \
      --no-access-log "$@"
    ;;
  worker)
    exec celery -A forest_host worker --loglevel "${LOG_LEVEL:-INFO}" \
      --concurrency "${CELERY_CONCURRENCY:-4}" "$@"
    ;;
  runner)
    exec python manage.py pipeline_runner --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  beat)
    # Exactly one beat per deployment: it schedules the sweeps; two would double them.
    # Its schedule file goes under FOREST_VAR_DIR (settings.CELERY_BEAT_SCHEDULE_FILENAME).
    exec celery -A forest_host beat --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  migrate)
    # A one-off job before new web/worker code starts (docs/deploy.md, Upgrades).
    exec python manage.py migrate --noinput "$@"
    ;;
  edge)
    # The Host-side ingress edge, where this build has one: the first management command named
    # forest_edge*; otherwise say so rather than start something else.
    edge_command="$(python manage.py help --commands | grep -m1 '^forest_edge' || true)"
    if [ -z "$edge_command" ]; then
      echo "forest-host: this build has no ingress edge command (manage.py forest_edge)" >&2
      exit 64
    fi
    exec python manage.py "$edge_command" "$@"
    ;;
  manage)
    exec python manage.py "$@"
    ;;
  *)
    echo "forest-host: unknown process '$role' (web, worker, beat, runner, migrate, edge, manage)" >&2
    exit 64
    ;;
esac
