"""The round's counters, declared once: name, the verb that writes it, meaning.

Each verb writes its counters into its round's ``rounds.counts`` map (the
ledger) through :func:`checked`, which refuses a name not declared here for
that verb; ``jobs/rounds.py`` (the round summary) and ``jobs/status.py`` read
them through :func:`value` and :func:`family`, which refuse an undeclared name.
``tests/test_counters.py`` runs a round and checks both ways: every counter
written is declared, every declared counter is written.

Two families have one member per value of an enum: ``fetched_<outcome>``
(every :class:`crawl_udfs.rows.Outcome`, zeros included) and
``status_<status>`` (the :class:`schemas.status.Status` values of the round's
updated rows, only those present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from crawl_udfs.rows import Outcome
from schemas.status import Status


@dataclass(frozen=True)
class Counter:
    name: str
    verb: str        # generate, fetch or update
    meaning: str


@dataclass(frozen=True)
class Family:
    prefix: str                 # members are named prefix + value
    values: tuple[str, ...]
    verb: str
    meaning: str                # of one member


COUNTERS: tuple[Counter, ...] = (
    Counter("generated", "generate", "URLs in the round's fetch list"),
    Counter("generated_discovery", "generate", "of them, never fetched before"),
    Counter("generated_recrawl", "generate", "of them, fetched before (re-fetches)"),
    Counter("generated_hosts", "generate", "distinct hosts in the fetch list"),
    Counter("generated_unresolved_hosts", "generate", "of them, listed without an address (no answer, or none "
                                                      "within generate.resolve_wait_s): their fetch task looks "
                                                      "them up and defers one whose address another task holds"),
    Counter("pages", "fetch", "page rows the fetch tasks returned (one per fetch-list URL, one per URL followed)"),
    Counter("in_round_pages", "fetch", "of them, URLs followed inside the round and tried (fetch.follow_in_round)"),
    Counter("pages_ok", "fetch", "pages with outcome ok (the same as fetched_ok, kept for readers of the ledger)"),
    Counter("not_attempted", "fetch", "pages never attempted (the same as fetched_not_attempted)"),
    Counter("tail_cut", "fetch", "of them, left queued because a task ended its round on a thin tail "
                                 "(crawl_udfs/tail.py; the rest: the window ended)"),
    Counter("hosts", "fetch", "host rows the fetch tasks returned"),
    Counter("requests", "fetch", "HTTP requests that reached a host, robots.txt included"),
    Counter("robots_requests", "fetch", "of them, robots.txt requests (redirect hops included)"),
    Counter("bytes", "fetch", "body bytes received on the wire"),
    Counter("politeness_wait_ms", "fetch", "milliseconds URLs waited for their host, summed over URLs"),
    Counter("outlinks_filtered", "fetch", "outlinks and redirect targets the admission rules rejected"),
    Counter("new_urls", "update", "URLs first discovered this round: every row the MERGE inserts into crawldb "
                                  "(new outlinks, and URLs followed and fetched inside the round)"),
    Counter("updated_urls", "update", "crawldb rows of the round's fetched URLs rewritten (rows that existed before)"),
    Counter("duplicates", "update", "fetched URLs of the round (rewritten or followed in-round) marked exact "
                                    "duplicates of another URL's copy (or near-duplicates: dedup.near_duplicates)"),
    Counter("near_duplicates", "update", "of them, near-duplicates (SimHash, MinHash and length) of an earlier page "
                                         "(plus indexed pages a canonical target of the round beat)"),
    Counter("repointed", "update", "crawl-DB rows not of the round whose status or dup_of changed: originals "
                                   "a canonical target beat, copies of an original that went (jobs/originals.py)"),
    Counter("sitemap_due", "update", "known URLs a sitemap made due now, ahead of their schedule: a lastmod after "
            "their last fetch, or a stored sitemap whose host's robots.txt was fetched (jobs/sitemap_transforms.py)"),
    Counter("moved_to_known", "update", "known URLs a permanent redirect of the round points to: given the larger "
            "score and, when never fetched, the moved page's change history (update_transforms.moved_to_known)"),
    Counter("near_dup_index", "update", "near_dup_index rows appended (block keys of the round's new originals)"),
    Counter("budget_exhausted", "update", "crawldb rows left budget_exhausted by this round's MERGE source"),
    Counter("hosts_updated", "update", "hosts rows written (hosts seen this round)"),
    Counter("hosts_throttled", "update", "of them, throttled by trap detection (round_cap set)"),
    Counter("hosts_trap_parked", "update", "of them, parked as traps"),
    Counter("fetch_log_rows", "update", "fetch_log rows appended (attempted URLs)"),
    Counter("links", "update", "links rows appended (outlink edges)"),
    Counter("frontier_size", "update", "crawldb URLs in a state generate may select, after the MERGE"),
)

FAMILIES: tuple[Family, ...] = (
    Family("fetched_", tuple(o.value for o in Outcome), "fetch", "pages with this outcome"),
    Family("status_", tuple(s.value for s in Status), "update", "rows of the MERGE source left in this status"),
)

_BY_NAME = {c.name: c.verb for c in COUNTERS}
_BY_NAME.update({f.prefix + v: f.verb for f in FAMILIES for v in f.values})


def verb_of(name: str) -> str:
    """The verb that writes counter ``name``; KeyError when it is not declared."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"counter {name!r} is not declared in schemas/counters.py") from None


def checked(verb: str, counts: Mapping[str, int]) -> dict[str, int]:
    """``counts`` as a dict, after checking that each is a counter declared for ``verb``."""
    wrong = sorted(n for n in counts if _BY_NAME.get(n) != verb)
    if wrong:
        raise KeyError(f"{verb} writes counters not declared for it in schemas/counters.py: {wrong}")
    return dict(counts)


def value(counts: Mapping[str, int] | None, name: str) -> int:
    """Counter ``name`` of a ledger row's ``counts`` (0 when not written); ``name`` must be declared."""
    verb_of(name)
    return (counts or {}).get(name) or 0


def family(counts: Mapping[str, int] | None, prefix: str) -> dict[str, int]:
    """The members of family ``prefix`` written in ``counts``, by value, in declaration order."""
    fam = next((f for f in FAMILIES if f.prefix == prefix), None)
    if fam is None:
        raise KeyError(f"counter family {prefix!r} is not declared in schemas/counters.py")
    c = counts or {}
    return {v: c[prefix + v] for v in fam.values if prefix + v in c}
