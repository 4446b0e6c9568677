"""DNS for one fetch task: a hosts-file override, a TTL cache and the SSRF guard.

Guarantees:
- A name is looked up first in ``net.hosts_file`` (/etc/hosts format: ``ip name
  [aliases...]``, ``#`` comments, IPv4 and IPv6; a name on several lines gets all
  its addresses, in file order), then through the system resolver
  (``socket.getaddrinfo`` on the cache's own pool of ``net.dns_concurrency``
  threads, not the loop's default executor of cores + 4: a resolver that lets a
  few queries time out must not queue the others behind them until their own
  timeout runs out unanswered) bounded by ``fetch.dns_timeout_s``. Hosts-file
  answers never expire within the task.
- A resolver answer is cached ``fetch.dns_ttl_s`` seconds (getaddrinfo does
  not expose the record's own TTL, so one fixed TTL is used); a failure (no such
  name, no address, resolver timeout) is cached ``fetch.dns_negative_ttl_s``
  seconds, so the URLs of a dead host fail at once instead of each waiting for
  the resolver. Concurrent lookups of one name share a single query. The clock
  is injected, so expiry is tested without sleeping.
- :class:`AddressGuard` passes only globally routable unicast addresses, unless
  the address lies in one of ``net.allow_private_cidrs``. Refused: loopback,
  RFC 1918 private, link-local (incl. the cloud metadata address
  169.254.169.254), CGNAT 100.64/10, multicast, reserved, unspecified,
  documentation and benchmarking ranges, IPv6 ULA/site-local, and IPv6 forms
  that embed one of those IPv4 addresses (IPv4-mapped ``::ffff:a.b.c.d``, NAT64
  ``64:ff9b::/96``, 6to4 ``2002::/16``). The table is IANA's special-purpose
  address registries (RFC 6890 and successors), stricter than Python 3.11's
  ``is_global`` (which passes multicast, NAT64 and IPv4-compatible forms).
- :class:`CachingResolver` is the aiohttp resolver: it returns ONLY addresses the
  guard accepts and raises :class:`AddressBlocked` (never :class:`DnsError`) when
  a name resolves but nothing is left. aiohttp connects to exactly the addresses
  its resolver returns, so the check is the connect-time check and a DNS
  rebinding answer cannot slip between check and connect. aiohttp skips the
  resolver for IP-literal hosts; the fetcher therefore checks literals itself,
  and also re-checks every socket address before connecting and the transport's
  peer address after connecting (see :mod:`crawl_udfs.fetcher`).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult

from crawl_udfs.config import Section

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SystemLookup = Callable[[str], Awaitable[Sequence[str]]]


class DnsError(OSError):
    """The name could not be resolved (no such name, no address, timeout)."""


class AddressBlocked(OSError):
    """Every address of the name (or the literal address) is refused by the SSRF guard."""


# IANA special-purpose ranges refused even where Python's is_global says "global".
_DENY = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/8", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20",
        "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def parse_ip(text: str) -> IPAddress | None:
    """The address in ``text`` (an IPv6 zone ``%eth0`` is dropped), or None if it is not one."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None


class AddressGuard:
    """The SSRF guard: ``check(ip)`` is True only for addresses a crawler may connect to.

    Verdicts on address strings are remembered (the guard never changes; a fetch task
    asks about the same few addresses on every connection).
    """

    def __init__(self, allow_private_cidrs: Iterable[str] = ()):
        try:
            self._allow = tuple(ipaddress.ip_network(c) for c in allow_private_cidrs)
        except ValueError as e:
            raise ValueError(f"net.allow_private_cidrs: {e}") from None
        self._check_text = functools.lru_cache(maxsize=4096)(self._check)

    def check(self, ip: str | IPAddress) -> bool:
        return self._check_text(ip) if isinstance(ip, str) else self._check(ip)

    def _check(self, ip: str | IPAddress) -> bool:
        addr = ip if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else parse_ip(ip)
        if addr is None:
            return False
        if any(addr.version == n.version and addr in n for n in self._allow):
            return True
        if isinstance(addr, ipaddress.IPv6Address):
            embedded = addr.ipv4_mapped or addr.sixtofour
            if embedded is None and addr in _NAT64:
                embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
            if embedded is not None:
                return self._check(embedded)
        if any(addr.version == n.version and addr in n for n in _DENY):
            return False
        return addr.is_global and not (addr.is_multicast or addr.is_reserved or addr.is_unspecified)


def parse_hosts(text: str) -> dict[str, tuple[str, ...]]:
    """Parse /etc/hosts text into ``{lower-case name: (address, ...)}``; bad lines are skipped."""
    table: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        addr = parse_ip(fields[0])
        if addr is None:
            continue
        for name in fields[1:]:
            addrs = table.setdefault(_norm(name), [])
            if str(addr) not in addrs:
                addrs.append(str(addr))
    return {name: tuple(addrs) for name, addrs in table.items()}


def _norm(name: str) -> str:
    return name.strip().rstrip(".").lower()


async def system_lookup(name: str, executor: Executor | None = None) -> list[str]:
    """Addresses of ``name`` from the system resolver, in its order, without duplicates (the blocking
    call runs on ``executor``; None: the loop's default)."""
    infos = await asyncio.get_running_loop().run_in_executor(
        executor, functools.partial(socket.getaddrinfo, name, None, type=socket.SOCK_STREAM))
    seen: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.append(sockaddr[0])
    return seen


@dataclass(slots=True)
class _Entry:
    expires_at: float
    addrs: tuple[str, ...] = ()
    error: str | None = None


class DnsCache:
    """Hosts file first, then the system resolver; positive and negative answers cached.

    Build it inside the task's event loop; ``close()`` cancels lookups in flight.
    """

    def __init__(
        self,
        fetch: Section,
        net: Section,
        *,
        clock: Callable[[], float] = time.monotonic,
        lookup: SystemLookup = system_lookup,
    ):
        self._ttl = fetch.dns_ttl_s
        self._negative_ttl = fetch.dns_negative_ttl_s
        self._timeout = fetch.dns_timeout_s
        self._clock = clock
        self._pool: ThreadPoolExecutor | None = None
        if lookup is system_lookup:  # each lookup blocks a thread until answered: one per lookup allowed in flight
            self._pool = ThreadPoolExecutor(max_workers=max(1, int(net.dns_concurrency)), thread_name_prefix="dns")
            lookup = functools.partial(system_lookup, executor=self._pool)
        self._lookup = lookup
        try:
            self._hosts = parse_hosts(Path(net.hosts_file).read_text("utf-8", "replace")) if net.hosts_file else {}
        except OSError as e:
            raise ValueError(f"net.hosts_file {net.hosts_file!r} cannot be read: {e.strerror}") from None
        self._cache: dict[str, _Entry] = {}
        self._pending: dict[str, asyncio.Task[tuple[str, ...]]] = {}

    async def lookup(self, host: str) -> tuple[str, ...]:
        """All addresses of ``host`` (unfiltered), or :class:`DnsError`."""
        name = _norm(host)
        literal = parse_ip(name)
        if literal is not None:
            return (str(literal),)
        if name in self._hosts:
            return self._hosts[name]
        entry = self._cache.get(name)
        if entry is not None and entry.expires_at > self._clock():
            if entry.error is not None:
                raise DnsError(entry.error)
            return entry.addrs
        task = self._pending.get(name)
        if task is None:
            task = asyncio.ensure_future(self._resolve(name))
            self._pending[name] = task
            task.add_done_callback(lambda t, n=name: self._done(n, t))
        return await asyncio.shield(task)

    def _done(self, name: str, task: asyncio.Task) -> None:
        self._pending.pop(name, None)
        if not task.cancelled():
            task.exception()  # retrieved, so an unawaited failure is not logged

    async def _resolve(self, name: str) -> tuple[str, ...]:
        try:
            async with asyncio.timeout(self._timeout):
                addrs = tuple(a for a in await self._lookup(name) if parse_ip(a) is not None)
            error = None if addrs else f"{name}: no address"
        except TimeoutError:  # before OSError: TimeoutError is one
            addrs, error = (), f"{name}: lookup timed out after {self._timeout:g}s"
        except (OSError, UnicodeError) as e:
            addrs, error = (), f"{name}: {e}"
        ttl = self._ttl if error is None else self._negative_ttl
        self._cache[name] = _Entry(self._clock() + ttl, addrs, error)
        if error is not None:
            raise DnsError(error)
        return addrs

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        self._pending.clear()
        if self._pool is not None:  # a thread still inside getaddrinfo ends when the resolver answers
            self._pool.shutdown(wait=False, cancel_futures=True)


class CachingResolver(AbstractResolver):
    """aiohttp resolver over a :class:`DnsCache` that returns only guard-approved addresses.

    Raises :class:`DnsError` when the name does not resolve and
    :class:`AddressBlocked` when it resolves only to refused addresses; aiohttp
    wraps both in ``ClientConnectorDNSError`` with the original as ``os_error``.
    """

    def __init__(self, cache: DnsCache, guard: AddressGuard):
        self._cache = cache
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addrs = await self._cache.lookup(host)
        results: list[ResolveResult] = []
        of_family = 0
        for text in addrs:
            addr = parse_ip(text)
            fam = socket.AF_INET if addr.version == 4 else socket.AF_INET6
            if family not in (socket.AF_UNSPEC, fam):
                continue
            of_family += 1
            if not self._guard.check(addr):
                continue
            results.append(
                {"hostname": host, "host": str(addr), "port": port, "family": fam,
                 "proto": 0, "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV}
            )
        if not of_family:
            raise DnsError(f"{host}: no address of family {family!r}")
        if not results:
            raise AddressBlocked(f"{host} resolves only to refused addresses: {', '.join(addrs)}")
        return results

    async def first_address(self, host: str) -> tuple[str | None, str | None]:
        """(first guard-approved address of ``host``, None), or (None, "dns" | "ssrf_blocked")."""
        try:
            answers = await self.resolve(host, 0, socket.AF_UNSPEC)
        except AddressBlocked:
            return None, "ssrf_blocked"
        except OSError:  # DnsError, and anything else the lookup raised
            return None, "dns"
        return (answers[0]["host"], None) if answers else (None, "dns")

    async def close(self) -> None:
        await self._cache.close()


#: The error :func:`resolve_all` gives a name still unanswered when its ``within_s`` ran out.
PENDING = "dns_pending"


async def resolve_all(names: Iterable[str], fetch: Section, net: Section, *, lookup: SystemLookup = system_lookup,
                      within_s: float | None = None) -> list[tuple[str, str | None, str | None]]:
    """``(name, address, error)`` for each name, as :meth:`CachingResolver.first_address` says.

    At most ``net.dns_concurrency`` lookups in flight; each bounded by ``fetch.dns_timeout_s``,
    and all by ``within_s`` (None: no bound): a name still unanswered then gets error
    :data:`PENDING`. The resolve step before generate (``jobs/resolve.py``) runs this inside
    its Spark tasks.
    """
    names = list(names)
    resolver = CachingResolver(DnsCache(fetch, net, lookup=lookup), AddressGuard(net.allow_private_cidrs))
    sem = asyncio.Semaphore(int(net.dns_concurrency))

    async def one(name: str) -> tuple[str, str | None, str | None]:
        async with sem:
            return (name, *await resolver.first_address(name))

    tasks = [asyncio.ensure_future(one(n)) for n in names]
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=within_s)
        return [t.result() if t.done() else (n, None, PENDING) for n, t in zip(names, tasks)]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await resolver.close()
