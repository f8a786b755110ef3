"""Feature flags: declared in code (``registry``), overridden in the database, audited on every change.

Read a flag with ``flags.is_enabled(name, environment=..., team=...)`` — ``from apps import flags``
is not needed; import ``is_enabled`` from ``apps.flags.selectors``.
"""
