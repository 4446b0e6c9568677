"""robots.txt variants served by the test web, and the matcher that judges requests.

The server flags each logged request as disallowed or not by the rules the host
was serving at that moment. The matcher is deliberately small so that it is
clearly correct (RFC 9309): groups are chosen by product token
(case-insensitive, falling back to ``*``, groups for one agent merged), ``*``
matches any run of characters, a trailing ``$`` anchors, the longest pattern
wins, Allow wins ties, an empty Disallow is no rule, ``/robots.txt`` is always
allowed. Only the first 500 KiB of a body count (RFC 9309 §2.5): rules beyond
that are not held against a crawler. A 4xx robots.txt allows everything; a 5xx
one disallows everything (§2.3.1.3/4). Patterns and paths are compared after
decoding percent-escapes of unreserved characters; the test web only writes
ASCII patterns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit
from functools import lru_cache

AGENT = "deltacrawl"
PARSE_LIMIT = 512_000  # 500 KiB: the least RFC 9309 §2.5 asks a crawler to parse
ROBOTS_PATHS = ("/robots.txt", "/robots-real.txt", "/robots-hop-1.txt", "/robots-hop-2.txt")

ALLOW_ALL = "User-agent: *\nDisallow:\n"
DISALLOW_ALL = "User-agent: *\nDisallow: /\n"
PLAIN = "# plain rules\nUser-agent: *\nDisallow: /private/\nAllow: /private/ok.html\n"
OFFSITE_TARGET = "robots-crawl-delay-2.test"  # where robots-redirect-offsite's robots.txt redirects

# Variants: name -> one line of meaning (status, body, behaviour).
VARIANTS = {
    "allow-all": "200, 'Disallow:' (empty) for *: everything allowed",
    "plain": "200, * group: Disallow /private/, Allow /private/ok.html",
    "wildcard": "200, * group: Disallow /*.pdf$, /*.csv$, /private/*secret, /members/$",
    "agent-group": "200, * disallows everything; a deltacrawl group (shared with otherbot) disallows only /members/",
    "sitemap": "200, plain rules plus two Sitemap lines: /sitemap.xml (lists the pages) and /sitemap-extra.xml (404)",
    "crawl-delay-2": "200, * group: Crawl-delay 2, Disallow /private/",
    "crawl-delay-3600": "200, * group: Crawl-delay 3600 (absurd), nothing disallowed",
    "404": "404: no robots.txt, everything allowed",
    "410": "410: gone, everything allowed",
    "5xx": "503 on every robots.txt request: everything disallowed",
    "slow": "200 plain rules, but only after knobs.robots_slow_s seconds",
    "redirect": "301 /robots.txt -> /robots-real.txt (plain rules)",
    "redirect-chain": "301 -> /robots-hop-1.txt, 302 -> /robots-hop-2.txt, 307 -> /robots-real.txt (plain rules)",
    "redirect-offsite": f"301 -> http://{OFFSITE_TARGET}:<port>/robots.txt, another host's (its rules, Crawl-delay 2)",
    "huge": "200, ~620 KB: Disallow /early/ at the top, 20k filler rules, Disallow /beyond/ after 500 KiB",
    "changing": "allow-all until knobs.robots_change_after_s / _requests, then Disallow: / for *",
    "disallow-all": "200, Disallow: / for *",
    "bom-case": "200, UTF-8 BOM, upper-case keys; USER-AGENT * disallows all, a 'DeltaCrawl' group only /private/",
}


@dataclass(frozen=True)
class RobotsReply:
    status: int
    body: bytes = b""
    location: str | None = None  # absolute path (same host) or absolute URL (another host) for 3xx
    delay_s: float = 0.0


def body_text(variant: str, base_url: str) -> str:
    """The robots.txt text of a 200 variant (the final one for redirecting variants)."""
    if variant in ("allow-all", "404", "410", "5xx"):
        return ALLOW_ALL
    if variant in ("plain", "slow", "redirect", "redirect-chain"):
        return PLAIN
    if variant == "wildcard":
        return ("User-agent: *\nDisallow: /*.pdf$\nDisallow: /*.csv$\nDisallow: /private/*secret\n"
                "Disallow: /members/$\n")
    if variant == "agent-group":
        return ("User-agent: *\nDisallow: /\n\nUser-agent: otherbot\nUser-agent: deltacrawl\n"
                "Disallow: /members/\nAllow: /\n\nUser-agent: badbot\nDisallow: /\n")
    if variant == "sitemap":
        return (f"Sitemap: {base_url}/sitemap.xml\n" + PLAIN + f"\nSitemap: {base_url}/sitemap-extra.xml\n")
    if variant in ("crawl-delay-2", "redirect-offsite"):
        return "User-agent: *\nCrawl-delay: 2\nDisallow: /private/\n"
    if variant == "crawl-delay-3600":
        return "User-agent: *\nCrawl-delay: 3600\nDisallow:\n"
    if variant == "huge":
        head = "User-agent: *\nDisallow: /early/\n"
        filler = "".join(f"Disallow: /filler/{i:06d}/\n" for i in range(24_000))
        return head + filler + "Disallow: /beyond/\n"
    if variant == "changing":
        return ALLOW_ALL
    if variant == "disallow-all":
        return DISALLOW_ALL
    if variant == "bom-case":
        return "\ufeffUSER-AGENT: *\nDISALLOW: /\n\nuser-agent: DeltaCrawl\ndisallow: /private/\n"
    raise ValueError(f"unknown robots variant {variant!r}")


def reply(variant: str, path: str, base_url: str, changed: bool, slow_s: float) -> RobotsReply | None:
    """What the server answers for a robots path, or None if ``path`` is not one it serves."""
    if path not in ROBOTS_PATHS:
        return None
    redirects = {
        "redirect": {"/robots.txt": (301, "/robots-real.txt")},
        "redirect-chain": {
            "/robots.txt": (301, "/robots-hop-1.txt"),
            "/robots-hop-1.txt": (302, "/robots-hop-2.txt"),
            "/robots-hop-2.txt": (307, "/robots-real.txt"),
        },
    }.get(variant, {})
    if path in redirects:
        status, target = redirects[path]
        return RobotsReply(status, b"", target)
    if variant == "redirect-offsite" and path == "/robots.txt":
        return RobotsReply(301, b"", f"http://{OFFSITE_TARGET}:{urlsplit(base_url).port}/robots.txt")
    if path != "/robots.txt" and not (redirects and path == "/robots-real.txt"):
        return None
    if variant == "404":
        return RobotsReply(404, b"not found\n")
    if variant == "410":
        return RobotsReply(410, b"gone\n")
    if variant == "5xx":
        return RobotsReply(503, b"service unavailable\n")
    text = DISALLOW_ALL if (variant == "changing" and changed) else body_text(variant, base_url)
    return RobotsReply(200, text.encode("utf-8"), None, slow_s if variant == "slow" else 0.0)


# ---------------------------------------------------------------- matcher

_UNRESERVED = re.compile(r"%([0-9A-Fa-f]{2})")


def _decode_unreserved(path: str) -> str:
    def sub(m: re.Match) -> str:
        c = chr(int(m.group(1), 16))
        return c if (c.isascii() and (c.isalnum() or c in "-._~")) else "%" + m.group(1).upper()

    return _UNRESERVED.sub(sub, path)


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    return re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in body) + ("$" if anchored else ""), re.S)


def _matches(pattern: str, path: str) -> bool:
    if "*" not in pattern and not pattern.endswith("$"):
        return path.startswith(pattern)
    return _regex(pattern).match(path) is not None


@dataclass(frozen=True)
class Ruleset:
    """The rules of one agent's group(s): ``(allow, pattern)`` pairs, its Crawl-delay, the file's sitemaps."""

    rules: tuple[tuple[bool, str], ...] = ()
    crawl_delay: float | None = None
    sitemaps: tuple[str, ...] = ()
    disallow_all: bool = False  # robots.txt unavailable (5xx): nothing may be fetched

    def allowed(self, path: str) -> bool:
        """``path`` is the path plus query as sent on the request line."""
        if path == "/robots.txt":
            return True
        if self.disallow_all:
            return False
        path = _decode_unreserved(path)
        best_len, best_allow = -1, True
        for allow, pattern in self.rules:
            if len(pattern) < best_len or (len(pattern) == best_len and best_allow):
                continue
            if _matches(pattern, path):
                best_len, best_allow = len(pattern), allow
        return best_allow


UNAVAILABLE = Ruleset(disallow_all=True)


def _product_token(value: str) -> str:
    m = re.match(r"[A-Za-z_*-]+", value.strip())
    return m.group(0).lower() if m else ""


def parse(text: str | bytes, agent: str = AGENT) -> Ruleset:
    """Parse robots.txt (first 500 KiB only) and keep the group(s) for ``agent``, else ``*``."""
    if isinstance(text, bytes):
        text = text[:PARSE_LIMIT].decode("utf-8", errors="replace")
    else:
        text = text.encode("utf-8")[:PARSE_LIMIT].decode("utf-8", errors="ignore")
    text = text.lstrip("\ufeff")
    groups: list[tuple[set[str], list[tuple[bool, str]], list[float]]] = []
    sitemaps: list[str] = []
    current: tuple[set[str], list, list] | None = None
    in_agents = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "user-agent":
            if not in_agents:
                current = (set(), [], [])
                groups.append(current)
                in_agents = True
            current[0].add(_product_token(value))
            continue
        if key == "sitemap":
            sitemaps.append(value)
            continue
        in_agents = False
        if current is None:
            continue
        if key in ("allow", "disallow") and value:
            current[1].append((key == "allow", value))
        elif key == "crawl-delay":
            try:
                current[2].append(float(value))
            except ValueError:
                pass
    token = agent.lower()
    chosen = [g for g in groups if token in g[0]] or [g for g in groups if "*" in g[0]]
    rules = tuple(r for g in chosen for r in g[1])
    delays = [d for g in chosen for d in g[2]]
    return Ruleset(rules, delays[0] if delays else None, tuple(sitemaps))


def effective(variant: str, base_url: str, changed: bool) -> Ruleset:
    """The rules a host of this variant imposes on ``deltacrawl`` at a moment (``changed``: after the switch)."""
    if variant in ("404", "410"):
        return Ruleset()
    if variant == "5xx":
        return UNAVAILABLE
    return _parsed(variant, base_url, changed)


@lru_cache(maxsize=1024)
def _parsed(variant: str, base_url: str, changed: bool) -> Ruleset:
    return parse(DISALLOW_ALL if (variant == "changing" and changed) else body_text(variant, base_url))
