"""Bearer secrets for enrollment tokens and Grove credentials: ``<prefix>_<key id>.<secret>``.

The scheme (hashing, shape, constant-time match) is ``apps.core.bearer``, shared with staff/CI API
tokens; this module names the Grove prefixes.
"""
from __future__ import annotations

from apps.core.bearer import hash_secret, matches, new_secret, split

TOKEN_PREFIX = "fet"
CREDENTIAL_PREFIX = "fgc"

__all__ = ["CREDENTIAL_PREFIX", "TOKEN_PREFIX", "hash_secret", "matches", "new_secret", "split"]
