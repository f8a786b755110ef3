"""Django's PostgreSQL backend with the pool health check of ``apps.core.db`` (``ENGINE`` for pooled Host)."""
