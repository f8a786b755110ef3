"""Outbound HTTP that a request cannot aim inward. Pure: no Django (callers pass the settings).

Host fetches from addresses its callers name (an image import names a registry). Unchecked, that is a
server-side request forgery: a submitter could make Host connect to its own database and broker, to the
cloud metadata address, to anything on its private network, and read the answers (or their timing and
error text) back. ``Egress`` is the one gate for such fetches. Before connecting it resolves the name
itself and refuses (``EgressRefused``) a loopback, private, link-local, multicast, unspecified or reserved
address, and any of Host's own service endpoints (database, broker, cache, object store, its public URL),
unless the operator named that ``host:port`` explicitly (``allowed``). It then connects to the address it
checked, never resolving again (no DNS rebinding between the check and the connection); TLS still
verifies the certificate for the name. Every connect, read and write of one ``Egress`` shares one
deadline, so a peer trickling a byte at a time cannot hold a request past it. Proxies from the
environment are not used: the guard must see the address it connects to.

It plugs into httpx as an httpcore network backend (``transport()``): the address check runs where the
socket is opened, for the first request and for every redirect the caller chooses to follow.
"""
from __future__ import annotations

import ipaddress
import socket
import time
import typing
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import httpcore
import httpx

Resolver = Callable[[str, int], list[str]]
DEFAULT_PORTS = {"http": 80, "https": 443, "postgres": 5432, "postgresql": 5432, "redis": 6379, "rediss": 6379,
                 "amqp": 5672}


class EgressRefused(Exception):
    """The address a name resolved to may not be fetched from (``reason``: which rule refused it)."""

    def __init__(self, authority: str, reason: str):
        super().__init__(f"{authority}: {reason}")
        self.authority, self.reason = authority, reason


class DeadlinePassed(httpcore.TimeoutException):
    """The fetch's one deadline passed (raised where httpcore would raise its own timeout)."""


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (``getaddrinfo``), each once, in the resolver's order."""
    seen: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in seen:
            seen.append(sockaddr[0])
    return seen


def address_refusal(address: str) -> str:
    """Why ``address`` is not a public unicast address ("" when it is one)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for reason, hit in (("loopback", ip.is_loopback), ("unspecified", ip.is_unspecified),
                        ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
                        ("private", ip.is_private), ("reserved", ip.is_reserved),
                        ("not globally routable", not ip.is_global)):
        if hit:
            return f"a {reason} address"
    return ""


def endpoints(urls: Iterable[str]) -> frozenset[tuple[str, int]]:
    """(host, port) of each URL that names one (``postgres://u@db:5432/x`` → ("db", 5432))."""
    found = set()
    for url in urls:
        if not url or "://" not in url:
            continue
        try:
            parts = urlsplit(url)
            port = parts.port or DEFAULT_PORTS.get(parts.scheme.split("+")[0])
        except ValueError:
            continue
        if parts.hostname and port:
            found.add((parts.hostname, port))
    return frozenset(found)


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Egress:
    """One outbound fetch (its connections, redirects and reads): the address rules and one deadline."""

    def __init__(self, *, timeout_s: float, allowed: Iterable[str] = (), own_services: Iterable[str] = (),
                 resolver: Resolver | None = None):
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.allowed = frozenset(allowed)
        self.own_services = endpoints(own_services)
        self.resolver = resolver or system_resolver
        self._own_addresses: set[tuple[str, int]] | None = None

    def left(self, timeout: float | None = None) -> float:
        """Seconds this fetch may still wait (at most ``timeout``); past the deadline, ``DeadlinePassed``."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlinePassed("deadline passed")
        return remaining if timeout is None else min(timeout, remaining)

    def _own(self) -> set[tuple[str, int]]:
        """Host's own service endpoints as (address, port), resolved once per fetch."""
        if self._own_addresses is None:
            self._own_addresses = set()
            for host, port in self.own_services:
                try:
                    self._own_addresses.update((address, port) for address in self.resolver(host, port))
                except OSError:
                    continue  # a service name this machine cannot resolve is one it cannot reach either
        return self._own_addresses

    def admit(self, host: str, port: int) -> str:
        """The address to connect to for ``host:port``, or ``EgressRefused``: an operator-named
        ``host:port`` may be anything it resolves to; any other must resolve only to public addresses
        that are none of Host's own services (every address is checked: a name that also resolves
        inward is refused, whichever address a connect would pick)."""
        named = authority(host, port)
        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError):
            raise EgressRefused(named, "its name does not resolve") from None
        if not addresses:
            raise EgressRefused(named, "its name does not resolve")
        if named in self.allowed or f"{host}:{port}" in self.allowed:
            return addresses[0]
        own = self._own()
        for address in addresses:
            if reason := address_refusal(address):
                raise EgressRefused(named, f"it resolves to {reason}")
            if (address, port) in own:
                raise EgressRefused(named, "it is one of Host's own services")
        return addresses[0]

    def transport(self) -> httpx.HTTPTransport:
        """An httpx transport whose connections pass ``admit`` and keep to the deadline."""
        transport = httpx.HTTPTransport(trust_env=False, retries=0)
        # httpx builds its pool without a way to pass a network backend; the pool's own constructor takes
        # one, so the pool is rebuilt with the same SSL context (the only setting that differs from
        # httpcore's defaults here).
        transport._pool = httpcore.ConnectionPool(ssl_context=transport._pool._ssl_context,
                                                  network_backend=_GuardedBackend(self))
        return transport


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, egress: Egress):
        self.egress = egress
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable | None = None) -> httpcore.NetworkStream:
        address = self.egress.admit(host, port)
        stream = self.inner.connect_tcp(address, port, timeout=self.egress.left(timeout),
                                        local_address=local_address, socket_options=socket_options)
        return _DeadlineStream(stream, self.egress)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable | None = None) -> httpcore.NetworkStream:
        raise EgressRefused(path, "a local socket")

    def sleep(self, seconds: float) -> None:
        time.sleep(self.egress.left(seconds))


class _DeadlineStream(httpcore.NetworkStream):
    """Every read and write waits at most until the fetch's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, egress: Egress):
        self.stream, self.egress = stream, egress

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, timeout=self.egress.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, timeout=self.egress.left(timeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.stream.start_tls(ssl_context, server_hostname=server_hostname,
                                                     timeout=self.egress.left(timeout)), self.egress)

    def get_extra_info(self, info: str) -> typing.Any:
        return self.stream.get_extra_info(info)
