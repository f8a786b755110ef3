"""Shared plumbing: the error type and its API shape (including Django's own answers under /api/), the one
staff predicate, strict filter parts, the one human formatter, pagination, platform strings, logging."""
