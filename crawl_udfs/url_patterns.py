"""URL patterns of a host whose pages are copies of the host's other URLs: their features and matching.

Guarantees:
- **One matching rule.** :func:`matches` (plain Python, used by the fetch task's in-round
  following) and :func:`matches_column` (the same rule as a Spark Column, used by
  generate) decide alike on every URL (tests/test_url_patterns.py runs both on one
  table of cases): both take the path and query with the one regular expression
  :data:`PATH_QUERY` and compare strings the same way.
- **A feature is learnt only against its own counterpart.** :func:`features` names, for
  a normalised URL, each feature it has and the URL it would be without it: the first
  path segment (``/print/`` of ``/print/article/3.html``, counterpart
  ``/article/3.html``), and each query parameter, by name (``?sid``) and by name and
  value (``?ref=front``), counterpart the URL without that parameter. Update
  (``jobs/pattern_transforms.py``) counts a page matching a feature as a duplicate
  under it only when its counterpart is a stored page of the same host with the same
  content (the same original). That is the DUST idea of Bar-Yossef, Keidar and
  Schonfeld, "Do not crawl in the DUST: different URLs with similar text" (WWW 2007):
  a rule is a URL transformation that keeps the content, so dropping the URLs it
  produces loses nothing the host serves elsewhere. Which of two copies the crawl
  called the original (the earlier fetched) does not matter, and a prefix like
  ``/article/`` whose pages are the originals has no counterpart (``/3.html``) to copy,
  so it is never learnt; neither is ``?page=2`` of a paginated list, whose counterpart
  (the first page) has other content.

A rule is a dict ``{"pattern": …, "kind": …}`` (the ``hosts.dup_patterns`` struct; the
evidence fields are ignored here). Kinds and what they match (the path and query of a
normalised URL, compared case-sensitively, as the normaliser left them):

- ``prefix``: ``pattern`` is ``/seg/``; the path starts with it;
- ``param``: ``pattern`` is ``?name``; the query has a parameter ``name`` (any value);
- ``param_value``: ``pattern`` is ``?name=value``; the query has that exact parameter.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

PREFIX, PARAM, PARAM_VALUE = "prefix", "param", "param_value"
KINDS = (PREFIX, PARAM, PARAM_VALUE)

#: Path (group 1, "" when none) and query (group 2) of an absolute URL; Java and Python read it alike.
PATH_QUERY = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*([^?#]*)(?:\?([^#]*))?"
_PATH_QUERY = re.compile(PATH_QUERY)
#: The first path segment of a path that has more after it: ``/print/`` of ``/print/a.html``, not ``/a.html``.
_FIRST_SEGMENT = re.compile(r"^(/[^/]+/)(.+)$")


class Feature(NamedTuple):
    pattern: str      # "/print/", "?sid", "?ref=front"
    kind: str         # PREFIX, PARAM or PARAM_VALUE
    counterpart: str  # the URL without the feature (same host)
    value: str | None = None  # PARAM: the parameter's value here (rules by name need two of them)


def path_query(url: str) -> tuple[str, str]:
    """(path, query) of ``url``; ("", "") when it is not an absolute URL."""
    m = _PATH_QUERY.match(url)
    if m is None:
        return "", ""
    return m.group(1) or "", m.group(2) or ""


def features(url: str) -> list[Feature]:
    """The features of the normalised ``url`` and its counterpart without each (module docstring)."""
    m = _PATH_QUERY.match(url)
    if m is None:
        return []
    path, query = m.group(1) or "", m.group(2) or ""
    origin = url[:m.start(1)]
    out = []
    seg = _FIRST_SEGMENT.match(path)
    if seg:
        rest = "/" + seg.group(2)
        out.append(Feature(seg.group(1), PREFIX, origin + rest + (f"?{query}" if m.group(2) is not None else "")))
    params = query.split("&") if query else []
    names_seen = set()
    for i, param in enumerate(params):
        name, _, value = param.partition("=")
        if not name:
            continue
        others = "&".join(params[:i] + params[i + 1:])
        counterpart = origin + path + (f"?{others}" if others else "")
        if name not in names_seen:
            names_seen.add(name)
            out.append(Feature(f"?{name}", PARAM, counterpart, value))
        out.append(Feature(f"?{param}", PARAM_VALUE, counterpart))
    return out


def rule_matches(path: str, query: str, pattern: str, kind: str) -> bool:
    """Whether a URL with this path and query matches one rule (:func:`matches_column` is the same)."""
    if kind == PREFIX:
        return path.startswith(pattern)
    amp = f"&{query}&"
    if kind == PARAM:
        name = pattern[1:]
        return f"&{name}=" in amp or f"&{name}&" in amp
    if kind == PARAM_VALUE:
        return f"&{pattern[1:]}&" in amp
    return False


def matches(url: str, rules: Iterable[dict] | None) -> str | None:
    """The pattern of the first rule ``url`` matches, or None."""
    if not rules:
        return None
    path, query = path_query(url)
    for r in rules:
        if rule_matches(path, query, r["pattern"], r["kind"]):
            return r["pattern"]
    return None


def matches_column(url, rules):
    """:func:`matches` as a boolean Spark Column: ``url`` a string Column, ``rules`` an
    ``array<struct<pattern, kind, …>>`` Column (null or empty: false)."""
    from pyspark.sql import functions as F

    path = F.regexp_extract(url, PATH_QUERY, 1)
    amp = F.concat(F.lit("&"), F.regexp_extract(url, PATH_QUERY, 2), F.lit("&"))

    def one(r):
        tail = F.substring(r["pattern"], 2, 1 << 20)
        return (F.when(r["kind"] == F.lit(PREFIX), F.startswith(path, r["pattern"]))
                .when(r["kind"] == F.lit(PARAM),
                      F.contains(amp, F.concat(F.lit("&"), tail, F.lit("=")))
                      | F.contains(amp, F.concat(F.lit("&"), tail, F.lit("&"))))
                .when(r["kind"] == F.lit(PARAM_VALUE), F.contains(amp, F.concat(F.lit("&"), tail, F.lit("&"))))
                .otherwise(F.lit(False)))

    return F.coalesce(F.exists(rules, one), F.lit(False))
