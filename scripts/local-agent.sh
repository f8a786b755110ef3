#!/usr/bin/env bash
# `make run`'s local native Grove: enroll this machine once (state in var/agent), then run forest-agent
# with native jobs on. Waits for Host's web process first; honcho stops it with the rest on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_URL=${FOREST_LOCAL_HOST_URL:-http://127.0.0.1:8000}
# One identity per database (var/agent/<key of DATABASE_URL>): an identity enrolled against SQLite is unknown
# to PostgreSQL, so switching databases enrolls afresh instead of stopping the stack.
STATE=${FOREST_AGENT_STATE_DIR:-var/agent/$(.venv/bin/python -c 'from apps.core.localenv import database_key; print(database_key())')}

.venv/bin/python - "$HOST_URL" <<'PY'
import sys, time, httpx
for _ in range(120):
    try:
        if httpx.get(f"{sys.argv[1]}/healthz", timeout=2).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.5)
PY
if ! ls "$STATE"/identity* >/dev/null 2>&1; then
  token=$(.venv/bin/python manage.py create_enrollment_token --roles compute,build --substrate native \
          --expires-in 600 --note "make run: local agent" 2>/dev/null | tail -n 1)
  .venv/bin/forest-agent enroll --host "$HOST_URL" --token "$token" --name "local-$(hostname)" --state-dir "$STATE"
fi
exec .venv/bin/forest-agent run --state-dir "$STATE" --enable-native-jobs --heartbeat-interval 10
