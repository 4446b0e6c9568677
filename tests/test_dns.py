"""DNS cache, hosts-file override and SSRF guard (crawl_udfs.dns); no real DNS traffic."""

import asyncio
import socket

import pytest

from crawl_udfs import config
from crawl_udfs.dns import AddressBlocked, AddressGuard, CachingResolver, DnsCache, DnsError, parse_hosts, resolve_all

HOSTS = """\
# a comment line
127.0.0.1   localhost  LocalHost.Localdomain.   # trailing comment
::1         ip6-localhost ip6-loopback
10.1.2.3    Intranet.Example intranet
not-an-ip   broken.example
   \t
192.0.2.7   # no name on this line
2001:db8::5 v6only.example
203.0.113.9 two.example
127.0.0.2   two.example
203.0.113.9 two.example
"""


def test_parse_hosts():
    table = parse_hosts(HOSTS)
    assert table["localhost"] == ("127.0.0.1",)
    assert table["localhost.localdomain"] == ("127.0.0.1",)  # case folded, trailing dot dropped
    assert table["ip6-localhost"] == ("::1",) and table["ip6-loopback"] == ("::1",)
    assert table["intranet.example"] == ("10.1.2.3",) and table["intranet"] == ("10.1.2.3",)
    assert table["v6only.example"] == ("2001:db8::5",)
    assert table["two.example"] == ("203.0.113.9", "127.0.0.2")  # all lines, file order, no duplicates
    assert "broken.example" not in table and "not-an-ip" not in table
    assert "#" not in table and "comment" not in table and "trailing" not in table
    assert len(table) == 8


class FakeLookup:
    """A system resolver stand-in that counts calls; answers from a dict, else 'no such name'."""

    def __init__(self, answers, delay=0.0):
        self.answers, self.delay, self.calls = answers, delay, []

    async def __call__(self, name):
        self.calls.append(name)
        if self.delay:
            await asyncio.sleep(self.delay)
        if name not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[name]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _conf(tmp_path, **kw):
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    overrides = {"net__hosts_file": str(hosts), "fetch__dns_ttl_s": 300.0, "fetch__dns_negative_ttl_s": 20.0}
    overrides.update(kw)
    return config.defaults().with_overrides(**overrides)


def test_hosts_file_first_and_ttl_expiry(tmp_path):
    conf, clock = _conf(tmp_path), Clock()
    fake = FakeLookup({"example.org": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14"]})

    async def run():
        cache = DnsCache(conf.fetch, conf.net, clock=clock, lookup=fake)
        assert await cache.lookup("LOCALHOST.") == ("127.0.0.1",)
        assert await cache.lookup("10.9.8.7") == ("10.9.8.7",)  # literal: no lookup
        assert fake.calls == []
        first = await cache.lookup("example.org")
        assert first == ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14")
        clock.now += 299.9
        assert await cache.lookup("Example.ORG") == first
        assert fake.calls == ["example.org"]
        clock.now += 0.1  # exactly the TTL: expired
        await cache.lookup("example.org")
        assert fake.calls == ["example.org", "example.org"]
        await cache.close()

    asyncio.run(run())


def test_negative_answers_cached_briefly(tmp_path):
    conf, clock = _conf(tmp_path), Clock()
    fake = FakeLookup({})

    async def run():
        cache = DnsCache(conf.fetch, conf.net, clock=clock, lookup=fake)
        for _ in range(3):
            with pytest.raises(DnsError, match="nowhere.example"):
                await cache.lookup("nowhere.example")
        assert fake.calls == ["nowhere.example"]
        clock.now += 19.9
        with pytest.raises(DnsError):
            await cache.lookup("nowhere.example")
        assert len(fake.calls) == 1
        clock.now += 0.1
        fake.answers["nowhere.example"] = ["198.51.100.1"]
        assert await cache.lookup("nowhere.example") == ("198.51.100.1",)
        assert len(fake.calls) == 2
        fake.answers["empty.example"] = []
        with pytest.raises(DnsError, match="no address"):
            await cache.lookup("empty.example")

    asyncio.run(run())


def test_timeout_is_a_dns_error_and_lookups_are_shared(tmp_path):
    conf, clock = _conf(tmp_path, fetch__dns_timeout_s=0.05), Clock()
    slow = FakeLookup({"slow.example": ["8.8.8.8"]}, delay=5.0)
    shared = FakeLookup({"shared.example": ["8.8.4.4"]}, delay=0.01)

    async def run():
        cache = DnsCache(conf.fetch, conf.net, clock=clock, lookup=slow)
        with pytest.raises(DnsError, match="timed out"):
            await cache.lookup("slow.example")
        with pytest.raises(DnsError, match="timed out"):  # remembered, not asked again
            await cache.lookup("slow.example")
        assert slow.calls == ["slow.example"]
        cache2 = DnsCache(conf.fetch, conf.net, clock=clock, lookup=shared)
        answers = await asyncio.gather(*(cache2.lookup("shared.example") for _ in range(5)))
        assert answers == [("8.8.4.4",)] * 5 and shared.calls == ["shared.example"]

    asyncio.run(run())


GUARD_TABLE = [
    # public
    ("8.8.8.8", True), ("93.184.215.14", True), ("1.1.1.1", True), ("2606:4700:4700::1111", True),
    ("2001:4860:4860::8888", True), ("::ffff:8.8.8.8", True), ("64:ff9b::808:808", True),
    ("2002:808:808::1", True), ("9.255.255.255", True), ("11.0.0.0", True), ("192.0.0.9", False),
    # loopback, unspecified
    ("127.0.0.1", False), ("127.255.255.254", False), ("0.0.0.0", False), ("0.1.2.3", False),
    ("::1", False), ("::", False),
    # RFC 1918 private, CGNAT, link-local and the metadata address
    ("10.0.0.1", False), ("172.16.0.1", False), ("172.31.255.255", False), ("192.168.1.1", False),
    ("100.64.0.1", False), ("100.127.255.254", False), ("169.254.169.254", False), ("169.254.0.1", False),
    ("fe80::1", False), ("fe80::1%eth0", False), ("fd00:ec2::254", False), ("fc00::1", False),
    # multicast, broadcast, reserved, documentation, benchmarking
    ("224.0.0.1", False), ("239.255.255.250", False), ("255.255.255.255", False), ("240.0.0.1", False),
    ("192.0.2.1", False), ("198.51.100.1", False), ("203.0.113.1", False), ("198.18.0.1", False),
    ("192.88.99.1", False), ("ff02::1", False), ("ff0e::1", False), ("2001:db8::1", False),
    ("3fff::1", False), ("100::1", False), ("fec0::1", False), ("2001::1", False),
    # IPv6 forms embedding a refused IPv4 address
    ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False), ("::ffff:169.254.169.254", False),
    ("64:ff9b::a00:1", False), ("64:ff9b::7f00:1", False), ("64:ff9b:1::1", False),
    ("2002:7f00:1::", False), ("2002:a9fe:a9fe::1", False), ("::7f00:1", False), ("::8.8.8.8", False),
    # not an address at all
    ("localhost", False), ("", False), ("127.1", False), ("2130706433", False), ("1.2.3.4.5", False),
]


@pytest.mark.parametrize("ip,allowed", GUARD_TABLE)
def test_guard_table(ip, allowed):
    assert AddressGuard().check(ip) is allowed


def test_guard_allow_list():
    guard = AddressGuard(["127.0.0.1/32", "10.20.0.0/16", "fd12::/16"])
    assert guard.check("127.0.0.1") and guard.check("::ffff:127.0.0.1")
    assert not guard.check("127.0.0.2") and not guard.check("::1")
    assert guard.check("10.20.30.40") and not guard.check("10.21.0.1")
    assert guard.check("fd12::9") and not guard.check("fd13::9")
    assert guard.check("8.8.8.8")  # public stays allowed
    with pytest.raises(ValueError, match="allow_private_cidrs"):
        AddressGuard(["10.0.0.0/33"])
    with pytest.raises(ValueError, match="host bits set"):  # never silently widened to 10.0.0.0/8
        AddressGuard(["10.1.2.3/8"])


def test_resolver_returns_only_guarded_addresses(tmp_path):
    """DNS rebinding needs the resolver to hand out a refused address; it never does."""
    conf = _conf(tmp_path)
    fake = FakeLookup({"mixed.example": ["127.0.0.1", "169.254.169.254", "127.0.0.2", "::1"],
                       "inside.example": ["10.0.0.1", "::ffff:127.0.0.2"]})

    async def run():
        cache = DnsCache(conf.fetch, conf.net, lookup=fake)
        resolver = CachingResolver(cache, AddressGuard(["127.0.0.1/32", "203.0.113.0/24"]))
        got = await resolver.resolve("two.example", 8080, family=socket.AF_UNSPEC)
        assert [(r["host"], r["port"], r["family"]) for r in got] == [("203.0.113.9", 8080, socket.AF_INET)]
        got = await resolver.resolve("mixed.example", 80, family=socket.AF_UNSPEC)
        assert [r["host"] for r in got] == ["127.0.0.1"]
        with pytest.raises(AddressBlocked, match="inside.example"):
            await resolver.resolve("inside.example", 80, family=socket.AF_UNSPEC)
        with pytest.raises(AddressBlocked):
            await resolver.resolve("intranet", 80, family=socket.AF_UNSPEC)
        with pytest.raises(DnsError) as info:
            await resolver.resolve("nowhere.example", 80, family=socket.AF_UNSPEC)
        assert not isinstance(info.value, AddressBlocked)
        with pytest.raises(DnsError, match="no address of family"):
            await resolver.resolve("two.example", 80, family=socket.AF_INET6)
        await resolver.close()

    asyncio.run(run())


def test_missing_hosts_file_is_a_clear_error(tmp_path):
    conf = config.defaults().with_overrides(net__hosts_file=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="net.hosts_file"):
        DnsCache(conf.fetch, conf.net)


class CountingLookup(FakeLookup):
    """FakeLookup that also records the most lookups it saw in flight at once."""

    def __init__(self, answers, delay):
        super().__init__(answers, delay)
        self.in_flight = self.peak = 0

    async def __call__(self, name):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().__call__(name)
        finally:
            self.in_flight -= 1


def test_resolve_all_guards_answers_and_bounds_concurrency(tmp_path):
    """The resolve step's lookup (jobs/resolve.py): first allowed address, or why none; bounded."""
    conf = _conf(tmp_path, net__dns_concurrency=3, net__allow_private_cidrs=("127.0.0.2/32",))
    names = [f"n{i}.example" for i in range(12)]
    fake = CountingLookup({**{n: ["198.51.100.1", "8.8.8.8"] for n in names}, "private.example": ["10.0.0.1"]},
                          delay=0.01)
    got = asyncio.run(resolve_all(names + ["two.example", "intranet", "private.example", "nowhere.example",
                                           "203.0.113.9"], conf.fetch, conf.net, lookup=fake))
    assert got[:12] == [(n, "8.8.8.8", None) for n in names]  # 198.51.100.0/24 is documentation: refused
    assert got[12:] == [("two.example", "127.0.0.2", None),    # hosts file; the allowed one of its two
                        ("intranet", None, "ssrf_blocked"),     # hosts file, private
                        ("private.example", None, "ssrf_blocked"),
                        ("nowhere.example", None, "dns"),
                        ("203.0.113.9", None, "ssrf_blocked")]  # a literal goes through the guard too
    assert fake.peak == 3


def test_system_lookups_run_side_by_side_up_to_dns_concurrency(tmp_path, monkeypatch):
    """A resolver that answers some queries only after seconds must not hold the others: each lookup
    allowed in flight gets a thread of its own (the loop's default executor has cores + 4)."""
    import threading
    import time

    from crawl_udfs import dns

    names = [f"slow{i}.example" for i in range(24)]
    lock, seen = threading.Lock(), {"now": 0, "peak": 0}

    def slow_getaddrinfo(name, port, type=0):  # a resolver that takes 0.3 s a query, like a lost packet's retry
        with lock:
            seen["now"] += 1
            seen["peak"] = max(seen["peak"], seen["now"])
        time.sleep(0.3)
        with lock:
            seen["now"] -= 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 0))]

    monkeypatch.setattr(dns.socket, "getaddrinfo", slow_getaddrinfo)
    conf = _conf(tmp_path, net__dns_concurrency=24)
    started = time.monotonic()
    got = asyncio.run(resolve_all(names, conf.fetch, conf.net))
    took = time.monotonic() - started
    assert got == [(n, "8.8.8.8", None) for n in names]
    assert seen["peak"] == 24          # all in flight at once; the default executor gives 2 cores 6
    assert took < 0.3 * 3              # one round of queries, not four waves


def test_resolve_all_gives_names_unanswered_within_the_wait_as_pending(tmp_path):
    """The resolve step before generate waits ``generate.resolve_wait_s`` at most (jobs/resolve.py)."""
    from crawl_udfs.dns import PENDING

    conf = _conf(tmp_path, fetch__dns_timeout_s=5.0)

    async def lookup(name):
        await asyncio.sleep(2.0 if name.startswith("slow") else 0.0)
        return ["8.8.8.8"]

    import time
    started = time.monotonic()
    got = asyncio.run(resolve_all(["slow.example", "quick.example", "two.example"], conf.fetch, conf.net,
                                  lookup=lookup, within_s=0.3))
    assert time.monotonic() - started < 1.0
    assert got == [("slow.example", None, PENDING), ("quick.example", "8.8.8.8", None),
                   ("two.example", None, "ssrf_blocked")]   # the hosts file answers at once
