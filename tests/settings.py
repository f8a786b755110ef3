"""Test settings: the production settings module, with test-time environment defaults.

`make test` exports the real values (PostgreSQL and Redis on 127.0.0.1); these defaults make a bare
`pytest` on a developer machine behave the same way.
"""
import os

os.environ.setdefault("FOREST_ENV_FILE", "")  # never a developer's `make run` settings file

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/forest")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SECRET_KEY", "forest-test-secret-key-not-for-production")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
os.environ.setdefault("FLAGS_CACHE_TTL_S", "0")
os.environ.setdefault("PLACEMENT_FLEET_REFRESH_S", "0")
# The pool stays on under test; the suite's races run more threads at once than a web process would.
os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "20")

from forest_host.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only; never in production
