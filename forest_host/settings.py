"""Forest Host settings. Everything an operator changes comes from the environment.

With no ``DATABASE_URL`` / ``CELERY_BROKER_URL`` Host runs embedded (SQLite and a filesystem broker
under ``var/``) so ``make run`` needs no server; with them set it uses PostgreSQL and Redis.
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import dj_database_url
from celery.beat import BeatLazyFunc

from apps.core import localenv

# `make run`'s local settings file (var/forest.env), under whatever the environment already says.
localenv.load()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FOREST_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
# A missing SECRET_KEY is fatal in production; in DEBUG a fixed development key keeps `make run` simple.
SECRET_KEY = os.environ.get("SECRET_KEY") or (
    "django-insecure-forest-development-key-never-use-in-production" if DEBUG else ""
)
if not SECRET_KEY:
    raise RuntimeError("SECRET_KEY must be set when DEBUG is off (see README: Configuration).")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_prometheus",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "django_tables2",
    "apps.core",
    "apps.accounts",
    "apps.flags",
    "apps.groves",
    "apps.placement",
    "apps.accelerators",
    "apps.artifacts",
    "apps.dispatch",
    "apps.workloads",
    "apps.ingress",
    "apps.pipelines",
    "apps.compute",
    "apps.infra",
    "apps.staff",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.core.middleware.RequestMiddleware",
    "apps.core.middleware.OutageMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "apps.core.middleware.ApiErrorShapeMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.middleware.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.flags.middleware.FlagSnapshotMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "forest_host.urls"
WSGI_APPLICATION = "forest_host.wsgi.application"
ASGI_APPLICATION = "forest_host.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL connections are pooled per process (Django 5.2 + psycopg_pool; see apps/core/db.py): under
# uvicorn every request runs in a fresh thread, so a per-thread connection (CONN_MAX_AGE) either reconnects
# per request (0) or leaks one connection per thread (>0). The pool bounds each process to
# DATABASE_POOL_MAX_SIZE connections; its health check costs a round trip only after an idle spell.
# DATABASE_POOL=0 falls back to Django's per-thread connections (CONN_MAX_AGE, health check per request).
DATABASE_POOL = env_bool("DATABASE_POOL", True)
DATABASE_POOL_MIN_SIZE = int(os.environ.get("DATABASE_POOL_MIN_SIZE", "1"))
# 16: the lean routes' threads (FOREST_LEAN_JOB_THREADS for claims and reports, the event loop's executor
# for changes reads: min(32, cores + 4)) and Django's own request threads share it, so none of them can
# take every connection (at 6 the HA bench's bursts of claims starved Django's requests for the 10 s
# pool timeout).
DATABASE_POOL_MAX_SIZE = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "16"))
# Threads per web process for lean claims and reports (apps/dispatch/api/lean.py); each borrows a pooled
# connection, and one waiting on a job's row lock holds its thread.
FOREST_LEAN_JOB_THREADS = int(os.environ.get("FOREST_LEAN_JOB_THREADS", "8"))
DATABASE_POOL_TIMEOUT_S = float(os.environ.get("DATABASE_POOL_TIMEOUT_S", "10"))
# Connections of the lean wire routes' async pool (apps/dispatch/api/lean.py), per web process.
DATABASE_POOL_ASYNC_SIZE = int(os.environ.get("DATABASE_POOL_ASYNC_SIZE", "4"))
# Heartbeat statements (group-committed batches) in flight at once per web process (lean.HeartbeatBatch); at
# most the async pool's size. bench/heartbeat.py: docs/decisions.md "Heartbeat floor: pgbench".
FOREST_HEARTBEAT_BATCHES_IN_FLIGHT = max(1, min(DATABASE_POOL_ASYNC_SIZE,
                                                int(os.environ.get("FOREST_HEARTBEAT_BATCHES_IN_FLIGHT", "2"))))
# Groves whose last heartbeat row the lean route keeps per web process, keyed by their exact body bytes (a
# steady beat skips parsing and validation); 0 keeps none.
FOREST_HEARTBEAT_ROW_CACHE = int(os.environ.get("FOREST_HEARTBEAT_ROW_CACHE", "10000"))
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'forest.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
        conn_health_checks=True,
    )
}
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("DATABASE_TEST_NAME", "forest_test")}
# How long an embedded (SQLite) writer waits for the write lock before "database is locked" (s).
SQLITE_BUSY_TIMEOUT_S = float(os.environ.get("SQLITE_BUSY_TIMEOUT_S", "20"))
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The embedded default must hold with web + worker + beat writing at once:
    # - WAL: readers never block the writer, nor the writer readers;
    # - IMMEDIATE: every transaction takes the write lock at BEGIN, where the busy timeout applies. A
    #   deferred transaction that reads and then writes cannot wait for the lock (SQLite answers
    #   "database is locked" at once, whatever the timeout), which is what broke the second job;
    # - the busy timeout (sqlite3's ``timeout``) makes a second writer wait its turn.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": SQLITE_BUSY_TIMEOUT_S,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {}
elif DATABASE_POOL:
    # The backend is Django's PostgreSQL one with the cheap pool health check of apps/core/db.py.
    DATABASES["default"].update(ENGINE="apps.core.dbbackend", CONN_MAX_AGE=0, CONN_HEALTH_CHECKS=False)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": DATABASE_POOL_MIN_SIZE, "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": DATABASE_POOL_TIMEOUT_S, "max_idle": 300.0}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's model backend, reading a user's own and role permissions in one query (apps.accounts.backends).
AUTHENTICATION_BACKENDS = ["apps.accounts.backends.RoleBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# The ASGI app serves static files itself (admin CSS under uvicorn) unless a front proxy does it.
FOREST_SERVE_STATIC = env_bool("FOREST_SERVE_STATIC", DEBUG)
LOGIN_URL = "admin:login"

# Bodies larger than this are refused with 413 {"code": "payload_too_large"} before parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("FOREST_MAX_BODY_BYTES", str(1024 * 1024)))

# --- security: secure by default whenever DEBUG is off ----------------------------------------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- REST framework -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["apps.core.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["apps.core.api.renderers.FastJSONRenderer"]
    + (["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.ForestPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.forest_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Forest Host API",
    "DESCRIPTION": "Grove wire API (/api/forest/v1/groves/...) and the staff/CI API.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Groves and tools read the contract before they hold any credential.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # Served from drf-spectacular-sidecar's static files: the docs work with no internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Offline: the system's fonts (templates/drf_spectacular/redoc.html loads none from the internet).
    "REDOC_UI_SETTINGS": {"theme": {"typography": {"fontFamily": "system-ui, sans-serif",
                                                   "headings": {"fontFamily": "system-ui, sans-serif"}}}},
}

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # Every folder the filesystem transport writes, under var/ (kombu's defaults are relative to the
    # working directory: an unset control folder left ``control/`` in the checkout).
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    # kombu creates only the control folder, and only its last component: whichever process starts
    # first (web, worker or beat) makes them all.
    for _folder in ("queue", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    if CELERY_BROKER_URL.startswith("redis://"):
        # kombu's Redis transport with its broker-loss teardown fault closed (forest_host/broker.py).
        CELERY_BROKER_TRANSPORT = "forest_host.broker:Transport"
    # Every broker key under a prefix: Hosts (or bench runs, bench/_common.py) sharing one Redis database
    # keep apart, and one can delete its own keys without flushing the others'.
    if _key_prefix := os.environ.get("CELERY_BROKER_KEY_PREFIX", ""):
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = _key_prefix
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Recovery of a resume the broker lost is bounded by the sweep interval plus the resend delay.
PIPELINE_SWEEP_INTERVAL_S = float(os.environ.get("PIPELINE_SWEEP_INTERVAL_S", "15"))
PIPELINE_RESUME_RESEND_AFTER_S = float(os.environ.get("PIPELINE_RESUME_RESEND_AFTER_S", "30"))
CELERY_BEAT_SCHEDULE = {
    "groves.mark_stale": {"task": "groves.mark_stale", "schedule": timedelta(seconds=30)},
    "pipelines.sweep": {"task": "pipelines.sweep", "schedule": timedelta(seconds=PIPELINE_SWEEP_INTERVAL_S)},
    "accelerators.accrue_usage": {"task": "accelerators.accrue_usage", "schedule": timedelta(seconds=60)},
    "artifacts.gc": {"task": "artifacts.gc", "schedule": timedelta(hours=1)},
    "staff.refusal_rollup": {"task": "staff.refusal_rollup",
                             "schedule": timedelta(seconds=float(os.environ.get("STAFF_REFUSAL_ROLLUP_INTERVAL_S",
                                                                                "60")))},
}
# Liveness (docs/decisions.md "Host survives its broker"): beat sends core.liveness_probe to the worker queue
# and to the runner queue every FOREST_LIVENESS_PROBE_S; a role none of whose processes consumed one (beat: sent
# one) within FOREST_LIVENESS_WITHIN_S is stale on /healthz, /metrics and the staff status page.
FOREST_LIVENESS_PROBE_S = float(os.environ.get("FOREST_LIVENESS_PROBE_S", "10"))
FOREST_LIVENESS_WITHIN_S = float(os.environ.get("FOREST_LIVENESS_WITHIN_S", "60"))
CELERY_BEAT_SCHEDULER = "forest_host.beat:Scheduler"
# The refusal rollup re-reads placements changed this long before its last run too: a placement write
# stamps its row before it commits, so one that committed just after a run is still found by the next.
STAFF_REFUSAL_ROLLUP_SETTLE_S = float(os.environ.get("STAFF_REFUSAL_ROLLUP_SETTLE_S", "300"))

# Redis is also the wake-up channel for long-polling Groves; without it Host polls the database.
REDIS_URL = os.environ.get(
    "REDIS_URL", CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else ""
)

# --- Forest -------------------------------------------------------------------------------------
# A Grove whose last heartbeat is older than this is stale: not chosen for new work.
GROVE_STALE_AFTER_S = int(os.environ.get("GROVE_STALE_AFTER_S", "90"))
# Readiness, apart from liveness: a Grove that has not polled `changes` (or claimed) within this long is live
# but not ready for dispatch, and never chosen for new work (docs/decisions.md "Grove readiness"). Keep it
# above the agent's long-poll wait (30 s at most) plus the coarse poll stamp and the liveness touch window.
GROVE_READY_WITHIN_S = int(os.environ.get("GROVE_READY_WITHIN_S", "90"))
# A poll writes the Grove's last_polled_at at most this often (the hot path's write stays rare).
GROVE_POLL_STAMP_S = int(os.environ.get("GROVE_POLL_STAMP_S", "10"))
# A job assigned this long without a claim is `unclaimed`; the sweep ends it with that code when its Grove is
# not ready (docs/decisions.md "Unclaimed jobs").
GROVE_JOB_UNCLAIMED_AFTER_S = int(os.environ.get("GROVE_JOB_UNCLAIMED_AFTER_S", "30"))
# Capacity reports kept per Grove (a new row only when the reported capacity changes).
GROVE_REPORT_HISTORY = int(os.environ.get("GROVE_REPORT_HISTORY", "20"))
GROVE_LOG_TAIL_LINES = int(os.environ.get("GROVE_LOG_TAIL_LINES", "200"))
# Staff/CI API tokens always expire; `manage.py api_token create --expires-in DAYS` picks another term.
API_TOKEN_DEFAULT_TTL_DAYS = int(os.environ.get("API_TOKEN_DEFAULT_TTL_DAYS", "90"))
ENROLLMENT_TOKEN_DEFAULT_TTL_S = int(os.environ.get("ENROLLMENT_TOKEN_DEFAULT_TTL_S", str(24 * 3600)))
# How long one process may reuse its snapshot of flag overrides (a request pins one snapshot).
FLAGS_CACHE_TTL_S = float(os.environ.get("FLAGS_CACHE_TTL_S", "1.0"))
# Seconds a client is told to wait (Retry-After) when Host's database or broker is unreachable (503).
# Lists (staff pages, API pages) count matching rows exactly up to this many, "more than" beyond.
FOREST_LIST_TOTAL_CAP = int(os.environ.get("FOREST_LIST_TOTAL_CAP", "1000"))
FOREST_OUTAGE_RETRY_AFTER_S = int(os.environ.get("FOREST_OUTAGE_RETRY_AFTER_S", "2"))
# How stale one process's placement fleet snapshot may get (s); defaults to the flag snapshot's budget.
PLACEMENT_FLEET_REFRESH_S = float(os.environ.get("PLACEMENT_FLEET_REFRESH_S", FLAGS_CACHE_TTL_S))


def _pairs(text: str) -> dict[str, str]:
    return {key.strip(): value.strip() for key, _, value in (part.partition("=") for part in text.split(","))
            if key.strip()}


# The chooser's policy per Grove family, accelerator work apart (apps/placement/scoring.py; docs/decisions.md
# "Scoring"): spread (least allocated) keeps CPU work apart, bin-pack (most allocated) fills GPU Groves first.
PLACEMENT_POLICY = _pairs(os.environ.get(
    "PLACEMENT_POLICY", "build=spread,runtime=spread,compute=spread,accelerators=binpack"))
# Each score plugin's weight in the total (a weighted mean; the policy zeroes the plugin it does not use).
PLACEMENT_SCORE_WEIGHTS = {key: float(value) for key, value in _pairs(os.environ.get(
    "PLACEMENT_SCORE_WEIGHTS", "platform=3,spread=2,binpack=2,run_spread=1,preference=1")).items()}
# The body limit of POST placements/batch alone (a full batch of MAX_BATCH_SIZE items is ~1.7 MB of JSON).
PLACEMENT_BATCH_MAX_BODY_BYTES = int(os.environ.get("PLACEMENT_BATCH_MAX_BODY_BYTES", str(4 * 1024 * 1024)))

# The lean ASGI routes for heartbeat and changes (apps/dispatch/api/lean.py); off sends them through Django.
FOREST_LEAN_WIRE = env_bool("FOREST_LEAN_WIRE", True)
FOREST_NATIVE_WORKLOAD_DISPATCH = env_bool("FOREST_NATIVE_WORKLOAD_DISPATCH", False)
# Native ingress (host.deploy.native_ingress): the mesh networks a native Grove's reported address must be
# in, the public domains workload host names must be under, and the edge (manage.py forest_edge).
FOREST_MESH_NETWORKS = env_list("FOREST_MESH_NETWORKS", "10.0.0.0/8,100.64.0.0/10,fd00::/8")
FOREST_INGRESS_DOMAINS = env_list("FOREST_INGRESS_DOMAINS")
FOREST_INGRESS_ALLOW_WILDCARDS = env_bool("FOREST_INGRESS_ALLOW_WILDCARDS", False)
FOREST_EDGE_CONF_DIR = Path(os.environ.get("FOREST_EDGE_CONF_DIR", VAR_DIR / "edge" / "conf.d"))
FOREST_EDGE_NGINX_BINARY = os.environ.get("FOREST_EDGE_NGINX_BINARY", "nginx")
FOREST_EDGE_NGINX_CONFIG = os.environ.get("FOREST_EDGE_NGINX_CONFIG", "")  # -c; empty: nginx's default
FOREST_EDGE_NGINX_PREFIX = os.environ.get("FOREST_EDGE_NGINX_PREFIX", "")  # -p; empty: nginx's default
# TLS per host name: a path template with {hostname}, or one wildcard certificate for every name. make run
# (DEBUG) keeps its certificates under var/ (manage.py forest_edge --dev-cert NAME) and listens unprivileged.
_EDGE_TLS = str(VAR_DIR.resolve() / "edge" / "tls") if DEBUG else "/etc/forest/tls"
FOREST_EDGE_CERT_PATH = os.environ.get("FOREST_EDGE_CERT_PATH", _EDGE_TLS + "/{hostname}/fullchain.pem")
FOREST_EDGE_KEY_PATH = os.environ.get("FOREST_EDGE_KEY_PATH", _EDGE_TLS + "/{hostname}/privkey.pem")
FOREST_EDGE_WILDCARD_CERT = os.environ.get("FOREST_EDGE_WILDCARD_CERT", "")
FOREST_EDGE_WILDCARD_KEY = os.environ.get("FOREST_EDGE_WILDCARD_KEY", "")
FOREST_EDGE_HTTP_LISTEN = os.environ.get("FOREST_EDGE_HTTP_LISTEN", "127.0.0.1:8081" if DEBUG else "80")
FOREST_EDGE_HTTPS_LISTEN = os.environ.get("FOREST_EDGE_HTTPS_LISTEN", "127.0.0.1:8443" if DEBUG else "443")
# The public HTTPS port (what the HTTP -> HTTPS redirect names).
FOREST_EDGE_HTTPS_PORT = int(os.environ.get("FOREST_EDGE_HTTPS_PORT", "8443" if DEBUG else "443"))
FOREST_EDGE_HSTS_MAX_AGE_S = int(os.environ.get("FOREST_EDGE_HSTS_MAX_AGE_S", "31536000"))
FOREST_EDGE_MAX_BODY = os.environ.get("FOREST_EDGE_MAX_BODY", "10m")
FOREST_EDGE_CONNECT_TIMEOUT_S = int(os.environ.get("FOREST_EDGE_CONNECT_TIMEOUT_S", "5"))
FOREST_EDGE_READ_TIMEOUT_S = int(os.environ.get("FOREST_EDGE_READ_TIMEOUT_S", "60"))
FOREST_EDGE_SEND_TIMEOUT_S = int(os.environ.get("FOREST_EDGE_SEND_TIMEOUT_S", "60"))
FOREST_EDGE_PROXY_BIND = os.environ.get("FOREST_EDGE_PROXY_BIND", "")  # the edge's own mesh address, if any
# The ports a Grove's ingress proxy may report (low ports are system services'), and addresses no Grove may
# claim on top of the edge's own and the IP literals in Host's service URLs (apps/groves/mesh.py).
FOREST_MESH_PROXY_PORTS = os.environ.get("FOREST_MESH_PROXY_PORTS", "1024-65535")
FOREST_MESH_RESERVED = env_list("FOREST_MESH_RESERVED")
FOREST_EDGE_INTERVAL_S = float(os.environ.get("FOREST_EDGE_INTERVAL_S", "5"))
# Where agents reach Host (bundle URLs in workload generations are built on it).
FOREST_PUBLIC_URL = os.environ.get("FOREST_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
FOREST_CAS_ROOT = Path(os.environ.get("FOREST_CAS_ROOT", VAR_DIR / "cas"))
FOREST_MAX_BLOB_BYTES = int(os.environ.get("FOREST_MAX_BLOB_BYTES", str(4 * 1024**3)))
# The content-addressed artifact store: "filesystem" (embedded default, FOREST_CAS_ROOT) or "s3" (a bucket
# every Host replica shares; credentials from FOREST_CAS_S3_* or boto3's usual chain: AWS_* env, profile, role).
FOREST_CAS_BACKEND = os.environ.get("FOREST_CAS_BACKEND", "filesystem")
FOREST_CAS_S3_BUCKET = os.environ.get("FOREST_CAS_S3_BUCKET", "forest-artifacts")
FOREST_CAS_S3_REGION = os.environ.get("FOREST_CAS_S3_REGION", "us-east-1")
FOREST_CAS_S3_ENDPOINT_URL = os.environ.get("FOREST_CAS_S3_ENDPOINT_URL", "")  # MinIO/RGW; empty: AWS
# Host's own services as URLs: an outbound fetch named by a request (an image import) never connects to
# one of these, whatever address it has (apps/core/egress.py). Extra ones (a metadata proxy, a sidecar):
# FOREST_OWN_SERVICE_URLS, comma-separated.
FOREST_OWN_SERVICE_URLS = [url for url in (
    os.environ.get("DATABASE_URL", ""), CELERY_BROKER_URL, REDIS_URL, FOREST_PUBLIC_URL, FOREST_CAS_S3_ENDPOINT_URL,
    *env_list("FOREST_OWN_SERVICE_URLS")) if url]
FOREST_CAS_S3_PREFIX = os.environ.get("FOREST_CAS_S3_PREFIX", "")
FOREST_CAS_S3_ACCESS_KEY_ID = os.environ.get("FOREST_CAS_S3_ACCESS_KEY_ID", "")
FOREST_CAS_S3_SECRET_ACCESS_KEY = os.environ.get("FOREST_CAS_S3_SECRET_ACCESS_KEY", "")
FOREST_CAS_S3_TIMEOUT_S = float(os.environ.get("FOREST_CAS_S3_TIMEOUT_S", "30"))
# GC removes unreferenced blobs (and crashed uploads' staged bytes) only once they are this old.
FOREST_CAS_GC_GRACE_S = float(os.environ.get("FOREST_CAS_GC_GRACE_S", str(24 * 3600)))
# Lineage retention: GC keeps a blob any run used (as input or output) within this many seconds.
FOREST_LINEAGE_RETENTION_S = float(os.environ.get("FOREST_LINEAGE_RETENTION_S", str(30 * 24 * 3600)))
# OCI registries: how long one registry request may take, which registries speak plain HTTP (host:port),
# and the platforms an index is resolved for when the destination Grove reports no usable platform.
FOREST_OCI_TIMEOUT_S = float(os.environ.get("FOREST_OCI_TIMEOUT_S", "10"))
FOREST_OCI_INSECURE_REGISTRIES = env_list("FOREST_OCI_INSECURE_REGISTRIES")
# TLS registries on private (or loopback, link-local) addresses Host may fetch from, as host:port. Any
# other registry must resolve only to public addresses that are none of Host's own services (SSRF guard,
# apps/core/egress.py); a registry named in either list is the operator's choice and is not checked.
FOREST_OCI_PRIVATE_REGISTRIES = env_list("FOREST_OCI_PRIVATE_REGISTRIES")
FOREST_OCI_FALLBACK_PLATFORMS = env_list("FOREST_OCI_FALLBACK_PLATFORMS", "linux/amd64")
PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS = env_list("PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS")
# A node's tail runs in its job's terminal report when cheap (apps/pipelines/services/resume.py); off, or
# for runs above the node count, through the pipeline.node_resume task and its outbox row.
PIPELINE_INLINE_TAIL = env_bool("PIPELINE_INLINE_TAIL", True)
PIPELINE_INLINE_TAIL_MAX_NODES = int(os.environ.get("PIPELINE_INLINE_TAIL_MAX_NODES", "200"))
# /metrics answers a staff session, or a scraper sending "Authorization: Bearer <this token>"; unset = staff only.
FOREST_METRICS_TOKEN = os.environ.get("FOREST_METRICS_TOKEN", "")
DJANGO_TABLES2_TEMPLATE = "staff/_table.html"

# Runner slots: steps that wait in place hold a slot of their own pool (``manage.py pipeline_runner``, a
# Celery worker on PIPELINE_RUNNER_QUEUE with this many processes), never a worker that dispatches or
# resumes. More in-place steps than slots: the extra waits queue; their jobs still run and finish.
PIPELINE_RUNNER_QUEUE = os.environ.get("PIPELINE_RUNNER_QUEUE", "forest.runner")
# sent_at is evaluated by beat when it sends; a probe nobody consumed in time expires unrun.
for _role, _queue in (("worker", None), ("runner", PIPELINE_RUNNER_QUEUE)):
    CELERY_BEAT_SCHEDULE[f"core.liveness.{_role}"] = {
        "task": "core.liveness_probe", "schedule": timedelta(seconds=FOREST_LIVENESS_PROBE_S),
        "kwargs": {"role": _role, "sent_at": BeatLazyFunc(time.time)},
        "options": {"expires": FOREST_LIVENESS_WITHIN_S, **({"queue": _queue} if _queue else {})}}
PIPELINE_RUNNER_SLOTS = int(os.environ.get("PIPELINE_RUNNER_SLOTS", "4"))

# --- logging: structlog renders JSON in production, console lines in DEBUG --------------------
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {"()": "apps.core.logging.structured_formatter", "console": DEBUG}
    },
    "filters": {"api_query_redacted": {"()": "apps.core.logging.ApiQueryRedactingFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"},
                # Access lines: an API URL's query string never reaches the log (it may carry a secret).
                "django.server": {"handlers": ["console"], "filters": ["api_query_redacted"], "propagate": False},
                "uvicorn.access": {"handlers": ["console"], "filters": ["api_query_redacted"], "propagate": False},
                "django.request": {"filters": ["api_query_redacted"]}},
}
