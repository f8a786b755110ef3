"""A small OCI distribution client (``/v2/<name>/manifests/<ref>``, ``/v2/<name>/blobs/<digest>``)
over httpx. No Django: the caller passes the timeout and which registries speak plain HTTP.

Everything it returns is verified: a manifest fetched by digest must hash to that digest, a blob must
hash to its digest and fit its size. Network failures and timeouts are ``registry_unreachable``;
the registry's own refusals keep their meaning (``image_not_found``, ``registry_unauthorized``).
Anonymous access only: a registry that demands credentials answers ``registry_unauthorized``
(docs/decisions.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import httpx

from apps.artifacts.digests import sha256_digest
from apps.artifacts.oci import ACCEPT, MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES, ImageReference
from apps.core.errors import ForestError, NotFound, UpstreamFailed


@dataclass(frozen=True)
class Fetched:
    data: bytes
    media_type: str
    digest: str


class RegistryClient:
    def __init__(self, *, timeout_s: float, insecure_registries: frozenset[str] = frozenset()):
        self.timeout_s = timeout_s
        self.insecure = insecure_registries

    def _url(self, ref: ImageReference, tail: str) -> str:
        scheme = "http" if ref.registry in self.insecure else "https"
        return f"{scheme}://{ref.registry}/v2/{ref.repository}/{tail}"

    def _get(self, ref: ImageReference, tail: str, *, accept: str, limit: int,
             what: str) -> tuple[bytes, httpx.Headers]:
        url = self._url(ref, tail)
        try:
            with httpx.Client(timeout=self.timeout_s, follow_redirects=True) as client, \
                    client.stream("GET", url, headers={"Accept": accept}) as response:
                if response.status_code in (401, 403):
                    raise UpstreamFailed("registry_unauthorized",
                                         f"{ref.registry} refused anonymous access to {ref.repository} "
                                         f"({response.status_code}).")
                if response.status_code == 404:
                    raise NotFound("image_not_found", f"{ref.registry} has no {what} for {ref}.", field="reference")
                if response.status_code != 200:
                    raise UpstreamFailed("registry_error",
                                         f"{ref.registry} answered {response.status_code} for the {what} of {ref}.")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > limit:
                        raise UpstreamFailed("registry_error", f"The {what} of {ref} is larger than {limit} bytes.")
                return bytes(body), response.headers
        except ForestError:
            raise
        except httpx.TimeoutException:
            raise UpstreamFailed("registry_unreachable",
                                 f"{ref.registry} did not answer within {self.timeout_s:g} s.") from None
        except httpx.HTTPError as exc:
            raise UpstreamFailed("registry_unreachable", f"Cannot reach {ref.registry}: {exc}.") from None

    def manifest(self, ref: ImageReference, reference: str | None = None) -> Fetched:
        """The manifest or index for ``reference`` (a tag or a digest; default: the ref's own)."""
        wanted = reference or ref.reference
        data, headers = self._get(ref, f"manifests/{wanted}", accept=ACCEPT, limit=MAX_MANIFEST_BYTES,
                                  what="manifest")
        digest = sha256_digest(data)
        if wanted.startswith("sha256:") and digest != wanted:
            raise UpstreamFailed("digest_mismatch",
                                 f"{ref.registry} returned a manifest hashing to {digest}, not {wanted}.")
        media_type = headers.get("content-type", "").split(";")[0].strip()
        return Fetched(data=data, media_type=media_type, digest=digest)

    def blob(self, ref: ImageReference, digest: str, *, limit: int = MAX_CONFIG_BYTES) -> bytes:
        """A (small) blob such as an image config, verified against its digest."""
        data, _ = self._get(ref, f"blobs/{digest}", accept="*/*", limit=limit, what="blob")
        if sha256_digest(data) != digest:
            raise UpstreamFailed("digest_mismatch", f"{ref.registry} returned a blob that does not hash to {digest}.")
        return data
