#!/usr/bin/env bash
# `make run`'s local native Grove: enroll this machine once (state in var/agent), then run forest-agent
# with native jobs on. Waits for Host's web process first; honcho stops it with the rest on Ctrl-C.
# Where nginx is installed, the agent's ingress hop runs too: a private nginx (prefix var/agent-nginx,
# non-daemon) on the loopback "mesh" address FOREST_LOCAL_MESH_ADDRESS:FOREST_LOCAL_PROXY_PORT (default
# 127.0.0.1:8480), reported to Host in every heartbeat. FOREST_LOCAL_AGENT_TRUSTED_KEY=ID=PATH turns on
# native workloads (bundles signed by that key: PATH is the PUBLIC key). Host's URL and the proxy port follow
# `make run`'s settings (apps/core/localenv.py: the environment, else var/forest.env).
set -euo pipefail
cd "$(dirname "$0")/.."
# A wrong trusted key stops here, before nginx or enrollment, with the agent's own sentence (a private key
# given where the public one belongs is named as such); honcho then stops the whole stack.
if [ -n "${FOREST_LOCAL_AGENT_TRUSTED_KEY:-}" ]; then
  .venv/bin/python - "$FOREST_LOCAL_AGENT_TRUSTED_KEY" <<'PY' || exit 78
import sys
from forest_agent.errors import ConfigError
from forest_agent.native.signing import TrustedKeys
try:
    TrustedKeys.load(key_flags=[sys.argv[1]])
except ConfigError as exc:
    sys.exit(f"local agent: FOREST_LOCAL_AGENT_TRUSTED_KEY: {exc}")
PY
fi
# honcho hands every Procfile line its own $PORT (its base port + 100 per line): here it is not Host's web
# port, which comes from the settings `make run` has just written.
unset PORT
read -r HOST_DEFAULT PROXY_DEFAULT GROVE_NAME <<<"$(.venv/bin/python -m apps.core.localenv --get FOREST_HOST FOREST_LOCAL_PROXY_PORT FOREST_LOCAL_GROVE)"
HOST_URL=${FOREST_LOCAL_HOST_URL:-$HOST_DEFAULT}
echo "local agent: Host $HOST_URL, Grove $GROVE_NAME, mesh proxy port $PROXY_DEFAULT" >&2
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
  .venv/bin/forest-agent enroll --host "$HOST_URL" --token "$token" --name "$GROVE_NAME" --state-dir "$STATE"
fi
args=(run --state-dir "$STATE" --enable-native-jobs --heartbeat-interval 10)
if [ -n "${FOREST_LOCAL_AGENT_TRUSTED_KEY:-}" ]; then
  args+=(--enable-native-workloads --trusted-key "$FOREST_LOCAL_AGENT_TRUSTED_KEY")
fi
NGINX=$(command -v nginx || { test -x /usr/sbin/nginx && echo /usr/sbin/nginx; } || true)
if [ -z "$NGINX" ]; then
  echo "local agent: nginx not installed, so no ingress hop (native workloads run without ingress)" >&2
  exec .venv/bin/forest-agent "${args[@]}"
fi
ROOT="$(pwd)/var/agent-nginx"
mkdir -p "$ROOT/conf.d" "$ROOT/logs"
cat > "$ROOT/nginx.conf" <<CONF
pid $ROOT/nginx.pid;
error_log $ROOT/logs/error.log;
worker_processes 1;
events { worker_connections 256; }
http {
    access_log off;
$(for kind in client_body proxy fastcgi uwsgi scgi; do echo "    ${kind}_temp_path $ROOT/$kind;"; done)
    include $ROOT/conf.d/*.conf;
}
CONF
"$NGINX" -p "$ROOT" -c "$ROOT/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
# The mesh proxy gets a loopback address of its own: 127.0.0.1 is Host's own (its URL, the edge's listeners),
# which no Grove may report (apps/groves/mesh.py).
args+=(--nginx-conf-dir "$ROOT/conf.d" --nginx-binary "$NGINX" --nginx-config "$ROOT/nginx.conf" --nginx-prefix "$ROOT"
       --mesh-address "${FOREST_LOCAL_MESH_ADDRESS:-127.0.0.2}" --proxy-port "$PROXY_DEFAULT"
       --mesh-allow 127.0.0.0/8)
.venv/bin/forest-agent "${args[@]}" &
agent_pid=$!
# honcho signals this whole process group, so the agent already has its SIGTERM: a second one would cut its
# workloads' grace short. Wait for it to stop them, then stop nginx.
trap 'wait "$agent_pid"; kill -TERM "$nginx_pid" 2>/dev/null' TERM INT
wait "$agent_pid"
status=$?
kill -TERM "$nginx_pid" 2>/dev/null || true
exit "$status"
