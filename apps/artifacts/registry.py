"""A small OCI distribution client (``/v2/<name>/manifests/<ref>``, ``/v2/<name>/blobs/<digest>``)
over httpx. No Django: the caller passes the time limit, which registries speak plain HTTP, which TLS
registries may live on private addresses, Host's own service URLs, and (in tests) a resolver.

One client is one import: every request of it (manifest, index child, config, each redirect) goes through
one ``apps.core.egress.Egress``, so the import has one **total** deadline (``timeout_s``: connect and every
read together), and no request can be aimed inward: the registry's name is resolved and a loopback,
private, link-local, multicast, unspecified or reserved address, or one of Host's own services, is
refused before connecting (``registry_address_refused``) unless the operator named that registry
(``insecure_registries`` for plain HTTP, ``private_registries`` for TLS on a private address). Redirects
are followed by hand, at most ``MAX_REDIRECTS``, never from HTTPS to plain HTTP, and a hop to another
host passes the same address rules (an operator's naming of a registry covers that registry only).

Everything it returns is verified: a manifest fetched by digest must hash to that digest, a blob must
hash to its digest and fit its size. Failures name the registry and a stable code, never the operating
system's error text (which would tell a caller a closed port from a filtered one):
``registry_unreachable`` (no connection, TLS failure, an unreadable answer, the deadline),
``registry_address_refused``, ``registry_redirect_refused``; the registry's own refusals keep their
meaning (``image_not_found``, ``registry_unauthorized``, ``registry_error``). Anonymous access only: a
registry that demands credentials answers ``registry_unauthorized`` (docs/decisions.md).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from apps.artifacts.digests import sha256_digest
from apps.artifacts.oci import ACCEPT, MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES, ImageReference
from apps.core.egress import Egress, EgressRefused, Resolver, authority
from apps.core.errors import Forbidden, ForestError, NotFound, UpstreamFailed

MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Fetched:
    data: bytes
    media_type: str
    digest: str


class RegistryClient:
    """One import's registry reads (make one per import: its deadline starts when it is made)."""

    def __init__(self, *, timeout_s: float, insecure_registries: Iterable[str] = frozenset(),
                 private_registries: Iterable[str] = frozenset(), own_services: Iterable[str] = (),
                 resolver: Resolver | None = None):
        self.timeout_s = timeout_s
        self.insecure = frozenset(insecure_registries)
        self.private = frozenset(private_registries)
        self.own_services = tuple(own_services)
        self.resolver = resolver
        self._egress: Egress | None = None

    def _named(self, ref: ImageReference) -> frozenset[str]:
        """The ``host:port`` the operator allowed for this registry (empty when it is not named)."""
        if ref.registry not in self.insecure and ref.registry not in self.private:
            return frozenset()
        url = httpx.URL(self._url(ref, ""))
        return frozenset({authority(url.host, url.port or (80 if url.scheme == "http" else 443))})

    def _client(self, ref: ImageReference) -> httpx.Client:
        if self._egress is None:  # the first request starts the import's one deadline
            self._egress = Egress(timeout_s=self.timeout_s, allowed=self._named(ref), own_services=self.own_services,
                                  resolver=self.resolver)
        return httpx.Client(transport=self._egress.transport(), timeout=self.timeout_s, follow_redirects=False,
                            trust_env=False)

    def _url(self, ref: ImageReference, tail: str) -> str:
        scheme = "http" if ref.registry in self.insecure else "https"
        return f"{scheme}://{ref.registry}/v2/{ref.repository}/{tail}"

    def _follow(self, ref: ImageReference, client: httpx.Client, url: httpx.URL, accept: str) -> httpx.Response:
        """GET ``url``, following at most ``MAX_REDIRECTS`` redirects (each hop admitted by the egress
        rules when it connects); the open, streaming final response."""
        for _hop in range(MAX_REDIRECTS + 1):
            response = client.send(client.build_request("GET", url, headers={"Accept": accept}), stream=True)
            if response.status_code not in REDIRECTS or "location" not in response.headers:
                return response
            response.close()
            try:
                target = url.join(response.headers["location"])
            except (httpx.InvalidURL, ValueError):
                target = None
            if target is None or target.scheme not in ("http", "https") or (
                    url.scheme == "https" and target.scheme == "http"):
                raise UpstreamFailed("registry_redirect_refused",
                                     f"{ref.registry} redirected to an address Host does not follow "
                                     "(only HTTP(S), never from HTTPS to plain HTTP).")
            url = target
        raise UpstreamFailed("registry_redirect_refused",
                             f"{ref.registry} redirected more than {MAX_REDIRECTS} times for {ref}.")

    def _get(self, ref: ImageReference, tail: str, *, accept: str, limit: int,
             what: str) -> tuple[bytes, httpx.Headers]:
        url = httpx.URL(self._url(ref, tail))
        first = authority(url.host, url.port or (80 if url.scheme == "http" else 443))
        try:
            with self._client(ref) as client, contextlib.closing(self._follow(ref, client, url, accept)) as response:
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
        except EgressRefused as refused:
            if refused.authority != first:
                raise UpstreamFailed("registry_redirect_refused",
                                     f"{ref.registry} redirected to {refused.authority}, which Host does not fetch "
                                     f"from: {refused.reason}.") from None
            raise Forbidden("registry_address_refused",
                            f"Host does not fetch from {ref.registry}: {refused.reason}. An operator can allow a "
                            "registry on a private address by naming its host:port in "
                            "FOREST_OCI_PRIVATE_REGISTRIES (TLS) or FOREST_OCI_INSECURE_REGISTRIES (plain HTTP).",
                            field="reference", extra={"registry": ref.registry}) from None
        except (httpx.HTTPError, OSError):
            # One sentence whatever failed (refused, reset, TLS, timeout): the OS's words would tell a
            # caller a closed port from a filtered one.
            raise UpstreamFailed("registry_unreachable",
                                 f"{ref.registry} could not be reached or did not answer in time (an import "
                                 f"allows {self.timeout_s:g} s in all).", extra={"registry": ref.registry}) from None

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
