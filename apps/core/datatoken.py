"""Job data tokens: a short-lived capability for one Grove job's step data, for code that must not hold the
Grove's own credential (a Kubernetes pod's data containers). Signed with Django's ``signing`` (the site's
secret, a salt of its own); it names the Grove, the job, the run's node it may write under, the digests it
may read, and when it expires. Every use is also checked against the Grove's live scope (``artifacts.hooks``):
a token can only narrow what the Grove itself may do, never widen it."""
from __future__ import annotations

import time
from dataclasses import dataclass

from django.core import signing

from apps.core.errors import NotAuthenticated

SALT = "forest.job-data-token"
SCHEME = "Job"


@dataclass(frozen=True)
class DataClaims:
    grove_id: str
    job_id: str
    run_id: str
    node: str
    inputs: frozenset[str]
    expires_at: float


def data_token_sign(*, grove_id: str, job_id: str, run_id: str, node: str, inputs: list[str],
                    expires_at: float) -> str:
    return signing.dumps({"g": grove_id, "j": job_id, "r": run_id, "n": node, "i": sorted(set(inputs)),
                          "e": int(expires_at)}, salt=SALT, compress=True)


def data_token_read(token: str, *, now: float | None = None) -> DataClaims:
    """The token's claims, or ``401 data_token_invalid`` / ``401 data_token_expired``."""
    try:
        body = signing.loads(token, salt=SALT)
        claims = DataClaims(grove_id=str(body["g"]), job_id=str(body["j"]), run_id=str(body["r"]),
                            node=str(body["n"]), inputs=frozenset(body["i"]), expires_at=float(body["e"]))
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise NotAuthenticated("data_token_invalid", "This job data token is not one Host issued.") from None
    if (now if now is not None else time.time()) >= claims.expires_at:
        raise NotAuthenticated("data_token_expired", f"This job data token expired for job {claims.job_id}; "
                               "the controller asks for a new one for a live job.")
    return claims
