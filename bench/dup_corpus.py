"""The corpus a multi-round crawl keeps, scored against the test web's near-duplicate truth (issue 14).

One run: the local test web (ordinary sites, the ``dup`` hosts and the traps,
``--hosts`` hosts in all) is crawled through the CLI (``init``, ``inject`` every
home page, ``crawl --rounds R``, ``export``), each crawl in a fresh
``storage.root`` on a fresh copy of the web. With ``--compare KEY=VALUE`` a
second crawl runs the same way with that override (e.g.
``--compare dedup.near_duplicates=false``), so the two corpora are judged side
by side in one run.

The corpus is what a user takes away: the exported index's ``warc`` subset
(2xx responses) with ``duplicate_of`` null. Judged by:

- **duplicate share by true cluster** (the issue's measure): the test web labels
  12 articles, each served under 7 URLs (origin, variants, print version, two
  mirrors on other hosts) and 10 distinct briefs (``plan.dup_clusters()``). For
  every labelled group, the corpus rows beyond its first are duplicates kept.
  Share = those rows / the corpus rows of labelled URLs; also given over the
  whole corpus.
- **missed groups**: labelled groups with a fetched page but no row in the corpus
  (an original lost would be worse than a copy kept).
- **exact copies kept**: corpus rows whose payload digest another corpus row has
  (anywhere on the web, labelled or not).
- **requests**: the test web's own request log (every request the crawler made).

Nothing leaves loopback (tests/testweb listens on 127.10.x.y).

    .venv/bin/python -m bench.dup_corpus                                       # ~3 min
    .venv/bin/python -m bench.dup_corpus --compare dedup.near_duplicates=false # the key off, side by side
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testweb import TestWeb  # noqa: E402

KINDS = ["site", "dup", "trap"]


def crawl_and_export(work: Path, *, hosts: int, rounds: int, delay: float, window: float, sets: list[str]) -> dict:
    """One crawl of a fresh test web, exported; returns the corpus judged (see the module)."""
    import pyarrow.parquet as pq

    from jobs import cli

    work.mkdir(parents=True)
    with TestWeb(work / "web", n_hosts=hosts, seed=14, kinds=KINDS) as web:
        overlay = work / "crawl.toml"
        overlay.write_text(
            f'[storage]\nroot = "{work / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {delay}\n"
            f"[fetch]\ntask_budget_s = {window}\n")
        seeds = work / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        base = ["--conf", str(overlay)] + [a for s in sets for a in ("--set", s)]
        t0 = time.perf_counter()
        for argv in (["init"], ["inject", str(seeds)], ["crawl", "--rounds", str(rounds)],
                     ["export", "--out", str(work / "out")]):
            rc = cli.main(base + argv)
            if rc != 0:
                raise SystemExit(f"deltacrawl {' '.join(argv)} exited {rc}")
        seconds = time.perf_counter() - t0
        clusters = web.plan.dup_clusters()
        requests = len(web.log())
    index = pq.read_table(work / "out" / "index", columns=["url", "content_digest", "duplicate_of", "subset"])
    rows = [r for r in index.to_pylist() if r["subset"] == "warc"]
    return judge(rows, clusters) | {"requests": requests, "seconds": round(seconds, 1), "sets": sets}


def judge(rows: list[dict], clusters: dict[str, list[str]]) -> dict:
    """The corpus (rows of the ``warc`` subset) against the truth ``clusters`` (group -> URLs)."""
    group_of = {u: g for g, urls in clusters.items() for u in urls}
    kept = [r for r in rows if r["duplicate_of"] is None]
    fetched_groups = {group_of[r["url"]] for r in rows if r["url"] in group_of}
    per_group = collections.Counter(group_of[r["url"]] for r in kept if r["url"] in group_of)
    labelled = sum(per_group.values())
    extra = sum(n - 1 for n in per_group.values())
    digests = collections.Counter(r["content_digest"] for r in kept)
    return {
        "corpus_rows": len(kept), "captures": len(rows),
        "labelled_rows": labelled, "labelled_groups_fetched": len(fetched_groups),
        "duplicates_kept": extra,
        "dup_share_labelled": extra / labelled if labelled else 0.0,
        "dup_share_corpus": extra / len(kept) if kept else 0.0,
        "groups_missed": sorted(fetched_groups - set(per_group)),
        "exact_copies_kept": sum(n - 1 for n in digests.values()),
        "worst_groups": [(g, n) for g, n in per_group.most_common(3) if n > 1],
    }


def report(results: list[dict]) -> str:
    head = ("| crawl | requests | corpus rows | labelled rows (groups) | duplicates kept | share, labelled | "
            "share, corpus | groups missed | exact copies kept | seconds |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        name = " ".join(r["sets"]) or "defaults"
        lines.append(f"| {name} | {r['requests']} | {r['corpus_rows']} | {r['labelled_rows']} "
                     f"({r['labelled_groups_fetched']}) | {r['duplicates_kept']} | {r['dup_share_labelled']:.1%} | "
                     f"{r['dup_share_corpus']:.2%} | {len(r['groups_missed'])} | {r['exact_copies_kept']} | "
                     f"{r['seconds']} |")
    for r in results:
        if r["worst_groups"] or r["groups_missed"]:
            lines.append(f"- {' '.join(r['sets']) or 'defaults'}: groups with copies kept {r['worst_groups']}, "
                         f"missed {r['groups_missed']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=40, help="test-web hosts (the dup and trap hosts included)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.2, help="politeness.host_delay_s")
    ap.add_argument("--window", type=float, default=40.0, help="fetch.task_budget_s")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE for every crawl")
    ap.add_argument("--compare", action="append", default=[], help="KEY=VALUE: a second crawl with it")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--keep", help="keep the crawls under this directory")
    args = ap.parse_args(argv)

    work = Path(args.keep or tempfile.mkdtemp(prefix="dup-corpus-"))
    runs = [args.sets] + ([args.sets + args.compare] if args.compare else [])
    results = []
    try:
        for i, sets in enumerate(runs):
            print(f"crawl {i + 1}/{len(runs)}: {' '.join(sets) or 'defaults'}", file=sys.stderr)
            results.append(crawl_and_export(work / f"crawl{i}", hosts=args.hosts, rounds=args.rounds,
                                            delay=args.delay, window=args.window, sets=sets))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"dup_corpus: {args.hosts} hosts ({', '.join(KINDS)}), {args.rounds} rounds, host delay {args.delay} s, "
          f"window {args.window} s; corpus = exported warc-subset rows with duplicate_of null")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
