"""Infrastructure: the policy-enforcing wrapper around OpenTofu for ``infra/`` (``manage.py infra``)."""
