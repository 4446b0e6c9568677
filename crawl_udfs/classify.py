"""Page classification: what one response to a page request means, decided once and without effects.

:func:`classify` is a pure function of the fetch-list item, its response and the
task's :class:`Rules`. It returns a :class:`Verdict`: the page's result row
(outcome, status, kept headers, validators, digest, redirect decision) and what
the caller must still do (store an exchange or a revisit record in WARC, parse
the body). A 2xx whose payload digest equals the stored copy's keeps its outcome
(``ok``: parsed, scheduled as unchanged) but is stored as an identical-payload
revisit (:func:`identical_payload`). The caller applies those effects (``crawl_udfs.pages``); nothing here
writes, parses or reads a clock, so the rules are tested row by row
(``tests/test_classify.py``).

Guarantees:
- **Redirect validity is decided here and nowhere else.** A 3xx is
  ``Outcome.REDIRECT`` (its target, normalised, in ``redirect_to`` and as an
  outlink of kind "redirect") only when its Location normalises, is not the URL
  itself, stays within ``fetch.max_redirect_hops`` and passes URL admission.
  Otherwise it is ``Outcome.BAD_REDIRECT`` with the reason in ``error_class``:
  ``bad_redirect`` (no usable Location), ``redirect_loop`` (to itself),
  ``too_many_redirects``, ``redirect_filtered:<why>``. ``update`` reads the
  outcome and never infers validity again.
- **Every outlink emitted passed URL admission**, the canonical link included
  (:func:`admitted`); the redirect target too, above.
- URL admission is :class:`crawl_udfs.admission.Admission` (the one definition,
  shared with inject), built in one place, :func:`rules_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from crawl_udfs.admission import Admission
from crawl_udfs.config import Config
from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.responses import clean, header
from crawl_udfs.rows import FetchItem, FetchResult, Outcome, Outlink
from crawl_udfs.signatures import payload_digest
from crawl_udfs.url_normalize import UrlNormalizer, fingerprint


@dataclass(frozen=True)
class Rules:
    """What classification depends on besides the response (plain values and two pure functions)."""

    keep_headers: frozenset[str]              # response headers kept in the row (lower-case names)
    max_redirect_hops: int                    # fetch.max_redirect_hops
    normalize: Callable[[str, str], str | None]  # (reference, base URL) -> normalised URL, None if unusable
    admission: Admission                      # URL -> None when admitted, else why not
    revisit_identical: bool = False           # warc.revisit_identical_payload


def rules_for(conf: Config, normalizer: UrlNormalizer) -> Rules:
    """The task's rules (Admission remembers its verdict per URL: outlinks repeat from page to page)."""
    return Rules(frozenset(conf.fetch.keep_headers), int(conf.fetch.max_redirect_hops), normalizer.normalize,
                 Admission(conf), bool(conf.warc.revisit_identical_payload))


class Store(Enum):
    """Which WARC record the caller writes for the exchange."""

    NOTHING = "nothing"    # no response to store (network failure)
    EXCHANGE = "exchange"  # request + response records
    REVISIT = "revisit"    # request + server-not-modified revisit record pointing at the stored copy (304)
    IDENTICAL = "identical"  # request + identical-payload-digest revisit record: a 2xx payload equal to the stored copy's


@dataclass(slots=True)
class Verdict:
    row: FetchResult           # the page's result; WARC pointer and parse fields are the caller's to fill
    store: Store
    parse: bool                # a 2xx page: parse it, keep its admitted outlinks, SimHash its main text
    content_type: str | None   # the Content-Type header as sent, for the parser's sniffing


def classify(item: FetchItem, resp: FetchResponse, rules: Rules) -> Verdict:
    """The result row of ``item`` fetched as ``resp``, and the effects still due (module docstring)."""
    keep = rules.keep_headers
    headers = {k.lower(): clean(v) for k, v in resp.headers if k.lower() in keep}
    row = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host, outcome=Outcome.ERROR.value,
                      fetch_time=resp.started_at, status_code=resp.status, ip=resp.ip,
                      redirect_hops=item.redirect_hops, headers=headers,
                      t_first_byte_ms=resp.t_first_byte_ms, t_total_ms=resp.t_total_ms,
                      wire_bytes=resp.wire_bytes, truncated=resp.truncated)
    if resp.error_class is not None or resp.status is None:
        row.error_class = resp.error_class or "other"
        row.error_message = resp.error_message
        return Verdict(row, Store.NOTHING, False, None)
    status = resp.status
    row.etag = headers.get("etag")
    row.last_modified = headers.get("last-modified")
    ctype = headers.get("content-type") or ""
    row.content_type = ctype.split(";")[0].strip().lower() or None
    if status == 304:
        row.outcome = Outcome.NOT_MODIFIED.value
        row.digest = item.prev_digest
        return Verdict(row, Store.REVISIT, False, ctype or None)
    row.digest = payload_digest(resp.body)
    row.content_length = len(resp.body)
    if 300 <= status < 400:
        location = header(resp.headers, "location")
        target = rules.normalize(location, item.url) if location else None
        row.redirect_to = target
        row.error_class = redirect_error(item, target, rules)
        if row.error_class is None:
            row.outcome = Outcome.REDIRECT.value
            row.outlinks = [Outlink(url=target, url_fp=fingerprint(target), kind="redirect")]
        else:
            row.outcome = Outcome.BAD_REDIRECT.value
        return Verdict(row, Store.EXCHANGE, False, ctype or None)
    row.outcome = (Outcome.HTTP_ERROR if status >= 400 else Outcome.OK).value
    store = Store.IDENTICAL if status < 300 and identical_payload(item, row.digest, rules) else Store.EXCHANGE
    return Verdict(row, store, status < 400, ctype or None)


def identical_payload(item: FetchItem, digest: str, rules: Rules) -> bool:
    """A 2xx payload with ``digest`` is stored as a revisit of the copy the crawl DB names (WARC 1.1 §6.7.2):
    the rule is on, that copy's digest is the same, and its record id is known (the revisit must name it)."""
    return rules.revisit_identical and item.prev_digest == digest and item.prev_warc_record_id is not None


def redirect_error(item: FetchItem, target: str | None, rules: Rules) -> str | None:
    """Why a redirect of ``item`` to ``target`` (normalised; None: unusable) is not followed, or None."""
    if target is None:
        return "bad_redirect"
    if target == item.url:
        return "redirect_loop"
    if item.redirect_hops + 1 > rules.max_redirect_hops:
        return "too_many_redirects"
    why = rules.admission.reason(target, kind="redirect", source_host=item.host, parent_depth=item.depth)
    return None if why is None else f"redirect_filtered:{why}"


def admitted(outlinks: list[Outlink], item: FetchItem, rules: Rules) -> tuple[list[Outlink], int]:
    """The outlinks of ``item``'s page URL admission lets through (canonical included), and how many it dropped."""
    ok = rules.admission.admitted([(o.url, o.kind) for o in outlinks], source_host=item.host,
                                  parent_depth=item.depth)
    kept = [o for o, yes in zip(outlinks, ok) if yes]
    return kept, len(outlinks) - len(kept)
