"""robots.txt: one host's fetch result turned into an immutable allow/deny policy.

Source: RFC 9309, "Robots Exclusion Protocol" (2022). Guarantees:

- :meth:`RobotsPolicy.from_fetch` maps the fetch of ``/robots.txt`` to a policy
  (§2.3.1): 2xx -> the body's rules (§2.3.1.1); 4xx -> "unavailable", no rule
  applies, allow all (§2.3.1.3); 5xx and no response at all (timeout,
  connection error, too many redirects) -> "unreachable", complete disallow
  (§2.3.1.4), flagged ``unavailable`` and re-checked after
  ``robots.unavailable_ttl_s``. Deliberate choices: 429 counts as a server
  error, not as "unavailable" -- it asks us to slow down and says nothing of
  robots.txt (Google's crawlers read it the same way); a bare 3xx reaching us
  means the redirect chain was not resolved, which §2.3.1.2 lets a crawler
  call unavailable, and we take the stricter reading (disallow, re-check);
  so does any status outside 2xx/4xx. A policy is trusted for
  ``robots.cache_ttl_s``, never more than 24 h (§2.4).
- Only the first ``robots.max_body_bytes`` (at least 500 KiB, §2.5) are parsed,
  and only the whole lines in them: a rule cut by the cap is dropped, never
  shortened (a shortened Allow would allow more than the site said).
- ``/robots.txt`` itself is always allowed (§2.2.2).
- :func:`allowed` and :meth:`RobotsPolicy.from_fetch` never raise, whatever the
  bytes; a failure inside (which the tests show does not happen) denies.

Matching. protego (Scrapy's parser) matches paths: the longest pattern wins,
Allow wins ties, ``*`` and a trailing ``$`` are wildcards, percent-encoding is
normalised on both sides (§2.2.2, §2.2.3). This wrapper splits the lines and
forms the groups itself, because protego departs from RFC 9309 there:

- A group is chosen by the product token, compared whole and
  case-insensitively (§2.2.1); the token of a ``User-agent`` value is its
  leading run of ``[A-Za-z_-]`` (``Googlebot/2.1`` -> ``googlebot``), as in
  Google's reference parser. Protego instead lets any name found inside the
  crawler's name match, and strips ``*`` from names.
- Records other than user-agent, allow and disallow (``Crawl-delay``, unknown
  lines) do not end a group (§2.2.4); in protego they do.
- Lines end at CR, LF or CRLF only (§2.2 ``EOL``), not at the other characters
  ``str.splitlines`` breaks on; a (partial) UTF-8 BOM is skipped; an invalid
  UTF-8 octet stays that octet (``%XX``) instead of becoming U+FFFD.

RFC 9309 normalises percent-encoding on both sides, while Google's reference
parser (and its conformance suite) escapes only the rule and compares the URL
as given. They disagree on raw non-ASCII URLs and on escaped unreserved
characters (``%62`` against ``b``); a polite crawler obeys the stricter, so a
URL is allowed only when both readings allow it. The literal reading runs
protego on rules and path whose ``%`` is itself escaped (``%25``), which turns
its decoding off; its precedence then counts an escape as 5 octets instead of
3, which matters only when two matching rules hold different numbers of escapes.

``Crawl-delay`` (not in RFC 9309) is read from the groups that apply (ours,
else ``*``); a value that is not a finite non-negative number is ignored, and
of several the largest is obeyed: since such records do not end a group,
``User-agent: *`` / ``Crawl-delay: 10`` / ``User-agent: us`` / ``Crawl-delay: 1``
is one group, and the slower delay is the polite reading.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any
from urllib.parse import quote, urlsplit

from protego import Protego

from crawl_udfs.config import Section

log = logging.getLogger(__name__)

_EOL = re.compile(r"\r\n|\r|\n")
_PARTIAL_BOMS = (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef")
# The product token of a User-agent value (RFC 9309 §2.2.1), as Google's parser reads it.
_TOKEN = re.compile(r"[A-Za-z_-]*")
_HEX_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
# Characters str.splitlines breaks on that are not RFC 9309 line ends; kept inside values.
_SPLITLINES_EXTRA = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_AUTHORITY = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//[^/?#]*")
# Field names, lower-cased with spaces, '-' and '_' removed (common misspellings as protego accepts them).
_FIELDS = {
    "useragent": "user-agent",
    "allow": "allow",
    "disallow": "disallow", "dissallow": "disallow", "dissalow": "disallow",
    "disalow": "disallow", "diasllow": "disallow", "disallaw": "disallow",
    "sitemap": "sitemap", "sitemaps": "sitemap",
    "crawldelay": "crawl-delay",
}
_QUERY_AGENT = "self"  # the one non-* agent emitted to protego: the group that matched ours


def robots_url(url: str) -> str:
    """``scheme://host[:port]/robots.txt`` for ``url`` (RFC 9309 §2.3); default ports dropped.

    Raises ValueError when ``url`` has no scheme or host, or a bad port.
    """
    parts = urlsplit(url.strip())
    host = parts.hostname
    if not parts.scheme or not host:
        raise ValueError(f"not an absolute URL with a host: {url!r}")
    scheme = parts.scheme.lower()
    port = parts.port
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if port is None or port == default else f"{host}:{port}"
    return f"{scheme}://{netloc}/robots.txt"


def allowed(robots_body: bytes, agent: str, url: str, robots_conf: Section) -> bool:
    """Whether ``agent`` (a bare product token) may fetch ``url`` under this robots.txt body.

    ``robots_conf`` is the ``[robots]`` section (its ``max_body_bytes`` caps what is parsed).
    """
    try:
        return RobotsPolicy.from_fetch(200, robots_body, 0.0, agent, robots_conf).allowed(url)
    except Exception:  # never raise into the fetch loop; deny instead
        log.exception("robots: allowed() failed; denying %r", url)
        return False


class RobotsPolicy:
    """The robots.txt policy of one host for one agent; immutable, picklable."""

    __slots__ = ("status", "body", "fetched_at", "expires_at", "agent", "state", "unavailable",
                 "crawl_delay", "sitemaps", "_conf", "_rfc", "_literal")

    status: int | None
    body: bytes | None
    fetched_at: float
    expires_at: float
    agent: str
    state: str              # "rules" (2xx) | "allow_all" (4xx) | "disallow_all" (anything else)
    unavailable: bool       # True when disallowed only until robots.txt can be fetched again
    crawl_delay: float | None
    sitemaps: tuple[str, ...]

    @classmethod
    def from_fetch(cls, status: int | None, body: bytes | None, fetched_at: float,
                   agent: str, robots_conf: Section) -> "RobotsPolicy":
        """The policy for a robots.txt fetch that ended with ``status`` (None: no response)."""
        self = object.__new__(cls)
        values: dict[str, Any] = dict(
            status=status, body=None, fetched_at=float(fetched_at), agent=agent, crawl_delay=None,
            sitemaps=(), _conf=robots_conf, _rfc=None, _literal=None, unavailable=False,
        )
        ttl = float(robots_conf.cache_ttl_s)
        try:
            if status is not None and 200 <= status < 300:
                values["state"] = "rules"
                values["body"] = _cap(bytes(body or b""), int(robots_conf.max_body_bytes))
                values.update(_parse(values["body"], agent))
            elif status is not None and 400 <= status < 500 and status != 429:
                values["state"] = "allow_all"
            else:
                values.update(state="disallow_all", unavailable=True)
                ttl = float(robots_conf.unavailable_ttl_s)
        except Exception:  # a bug here must not crash the task: deny and re-check soon
            log.exception("robots: cannot parse robots.txt (status %r); disallowing", status)
            values.update(state="disallow_all", unavailable=True, _rfc=None, _literal=None,
                          crawl_delay=None, sitemaps=())
            ttl = float(robots_conf.unavailable_ttl_s)
        # RFC 9309 §2.4 (at most 24 h) is the rule of robots.cache_ttl_s in crawl_udfs/config_rules.py
        values["expires_at"] = values["fetched_at"] + ttl
        for key, value in values.items():
            object.__setattr__(self, key, value)
        return self

    def allowed(self, url: str) -> bool:
        """Whether our agent may fetch ``url`` (absolute, or a path) under this policy."""
        try:
            path = _path_query(url)
            if path.partition("?")[0] == "/robots.txt":
                return True
            if self.state != "rules":
                return self.state == "allow_all"
            if not self._rfc.can_fetch("http://h" + path, _QUERY_AGENT):
                return False
            literal_path = _literal(path, unicode_too=False)
            if self._literal is self._rfc and literal_path == path:
                return True  # the same question to the same parser
            return self._literal.can_fetch("http://h" + literal_path, _QUERY_AGENT)
        except Exception:
            log.exception("robots: matching failed; denying %r", url)
            return False

    def is_fresh(self, now: float) -> bool:
        """Whether the policy may still be used at ``now`` (epoch seconds)."""
        return now < self.expires_at

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("RobotsPolicy is immutable")

    def __reduce__(self):
        return (RobotsPolicy.from_fetch, (self.status, self.body, self.fetched_at, self.agent, self._conf))

    def __repr__(self) -> str:
        return (f"RobotsPolicy(state={self.state!r}, status={self.status!r}, unavailable={self.unavailable}, "
                f"crawl_delay={self.crawl_delay!r}, expires_at={self.expires_at!r})")


def _cap(body: bytes, limit: int) -> bytes:
    """The whole lines within the first ``limit`` bytes (idempotent)."""
    if len(body) < limit:
        return body
    body = body[:limit]
    return body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]


def _decode(body: bytes) -> str:
    """UTF-8 text, partial BOM skipped; an invalid octet becomes its ``%XX`` escape."""
    for bom in _PARTIAL_BOMS:
        if body.startswith(bom):
            body = body[len(bom):]
            break
    text = body.decode("utf-8", "surrogateescape")
    return _SURROGATE.sub(lambda m: "%%%02X" % (ord(m.group()) - 0xDC00), text)


def _records(text: str):
    """(field, value) for each line naming a known field (RFC 9309 §2.2, lenient like protego)."""
    for line in _EOL.split(text):
        line = line.partition("#")[0].strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        field = _FIELDS.get(re.sub(r"[\s_-]+", "", key.lower())) if sep else None
        if field is None:  # "Disallow /x", "User agent foo": whitespace as the separator
            words = line.split(None, 2)
            for n in range(1, min(len(words), 2) + 1):
                field = _FIELDS.get(re.sub(r"[_-]+", "", "".join(words[:n]).lower()))
                if field is not None:
                    value = " ".join(words[n:])
                    break
        if field is not None:
            yield field, value.strip()


def _parse(body: bytes, agent: str) -> dict[str, Any]:
    """Groups (RFC 9309 §2.1, §2.2.1) -> the rules that apply to ``agent``, as two protego parsers."""
    token = agent.strip().lower()
    ours: list[tuple[str, str]] | None = None  # None: no group names us
    anyone: list[tuple[str, str]] = []
    sitemaps: dict[str, None] = {}
    agents: set[str] = set()
    records: list[tuple[str, str]] = []
    seen_rule = True  # a user-agent line after an allow/disallow line starts a new group

    def close() -> None:
        nonlocal ours
        if token and token in agents:
            ours = (ours or []) + records
        if "*" in agents:
            anyone.extend(records)

    for field, value in _records(_decode(body)):
        if field == "user-agent":
            if seen_rule:
                close()
                agents, records, seen_rule = set(), [], False
            star = value.startswith("*") and (len(value) == 1 or value[1].isspace())
            agents.add("*" if star else _TOKEN.match(value).group().lower())
        elif field == "sitemap":
            if value.lower().startswith(("http://", "https://")):
                sitemaps[value] = None
        elif agents:  # records before the first user-agent line belong to no group
            records.append((field, value))
            seen_rule = seen_rule or field != "crawl-delay"
    close()
    chosen = anyone if ours is None else ours
    rules = list(dict.fromkeys((f, _SPLITLINES_EXTRA.sub(lambda m: quote(m.group()), v))
                               for f, v in chosen if f != "crawl-delay"))
    delays = [d for f, v in chosen if f == "crawl-delay" and (d := _delay(v)) is not None]
    rfc_text, literal_text = _emit(rules, literal=False), _emit(rules, literal=True)
    rfc = Protego.parse(rfc_text)
    return dict(
        _rfc=rfc,
        # Rules without '%' or non-ASCII read the same both ways: one parser serves both.
        _literal=rfc if literal_text == rfc_text else Protego.parse(literal_text),
        crawl_delay=max(delays, default=None),
        sitemaps=tuple(sitemaps),
    )


def _delay(value: str) -> float | None:
    """A Crawl-delay value in seconds, or None unless a finite non-negative number."""
    try:
        delay = float(value)
    except ValueError:
        return None
    return delay if math.isfinite(delay) and delay >= 0 else None


def _emit(rules: list[tuple[str, str]], literal: bool) -> str:
    """One canonical group for protego; with ``literal``, values escaped so protego decodes nothing."""
    lines = [f"user-agent: {_QUERY_AGENT}"]
    for field, value in rules:
        lines.append(f"{field}: {_literal(value, unicode_too=True) if literal else value}")
    return "\n".join(lines)


def _literal(text: str, unicode_too: bool) -> str:
    """Escapes upper-cased, then every ``%`` escaped as ``%25`` (and, for rules, non-ASCII
    octets as ``%25XX``, which is Google's escaping of a rule shifted the same way)."""
    text = _HEX_ESCAPE.sub(lambda m: m.group().upper(), text).replace("%", "%25")
    if unicode_too and not text.isascii():
        text = "".join(c if c.isascii() else "".join("%%25%02X" % b for b in c.encode()) for c in text)
    return text


def _path_query(url: str) -> str:
    """The path and query of ``url`` that rules match (RFC 9309 §2.2.2): no fragment, "/" first."""
    url = _SURROGATE.sub("\ufffd", url.partition("#")[0])
    m = _AUTHORITY.match(url)
    path = url[m.end():] if m else url
    return path if path.startswith("/") else "/" + path
