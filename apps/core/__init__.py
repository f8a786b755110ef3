"""Shared plumbing: the error type and its API shape, pagination, platform strings, logging."""
