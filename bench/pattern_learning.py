"""Fetches saved by URL-pattern learning (``dedup.learn_patterns``) on the test web's near-duplicate hosts.

Two crawls of the same three dup hosts (``dup-origin``: articles, /print/ versions, ?ref=front
variants, briefs; ``dup-mirror-a``: the articles and ?page=1 variants; ``dup-mirror-b``: the
articles and ?ref=home variants), through the real verbs (``deltacrawl crawl``, in-process, one
Spark session), near-duplicates on, learning off then on, the same small per-host cap a round so
the hosts are discovered over several rounds. Judged from the test web's request log: page
requests (robots.txt not counted), and the article groups (``plan.dup_clusters()``) with no page
fetched (content lost; must be 0). Also printed: the patterns learnt (``status --hosts``) and the
URLs fetched before a pattern was learnt that it matches, each of which a re-crawl cycle no longer
fetches.

    .venv/bin/python -m bench.pattern_learning [--rounds 8] [--cap 10] [--set KEY=VALUE]...
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.testweb import TestWeb
from tests.urls import normalize


def one(learn: bool, rounds: int, cap: int, extra: list[str]) -> dict:
    from crawl_udfs import config
    from crawl_udfs.url_patterns import matches
    from jobs import cli, common, status
    from jobs.session import build_session

    d = Path(tempfile.mkdtemp(prefix="pattern-bench-"))
    with TestWeb(d / "web", n_hosts=3, seed=7, kinds=["dup"], knobs={"latency_s": 0.0}) as web:
        sets = [f'storage.root="{d / "crawl"}"', f'net.hosts_file="{web.hosts_file}"',
                'net.allow_private_cidrs=["127.10.0.0/16"]', "politeness.host_delay_s=0.2",
                "fetch.task_budget_s=20", f"generate.max_urls_per_host={cap}", "generate.fetch_partitions=1",
                "dedup.near_duplicates=true", f"dedup.learn_patterns={'true' if learn else 'false'}", *extra]
        base = [a for s in sets for a in ("--set", s)]
        seeds = d / "seeds.txt"
        seeds.write_text("\n".join(web.seeds(kinds=["dup"])) + "\n")
        start = time.perf_counter()
        assert cli.main(base + ["init"]) == 0 and cli.main(base + ["inject", str(seeds)]) == 0
        assert cli.main(base + ["crawl", "--rounds", str(rounds)]) == 0
        wall = time.perf_counter() - start
        log = [r for r in web.log() if r["path"] != "/robots.txt"]
        clusters = web.plan.dup_clusters()
        conf = config.load(overrides=sets)
        spark = build_session(conf)
        fetched = {normalize(web.url(r["host"], r["path"])) for r in log if r["status"] == 200}
        lost = sorted(g for g, urls in clusters.items() if not set(urls) & fetched)
        hosts = {r.host: r.dup_patterns or [] for r in common.read(spark, conf, "hosts").collect()}
        recrawl_saved = sum(1 for u in fetched if matches(u, hosts.get(u.split("/")[2].split(":")[0])))
        report = status.hosts_report(spark, conf)
        n_rounds = len([r for r in common.read(spark, conf, "rounds").collect()])
    return {"learn": learn, "requests": len(log), "distinct": len(fetched), "lost": lost, "rounds": n_rounds,
            "recrawl_saved": recrawl_saved, "wall": wall, "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="crawl --rounds (stops early when nothing is due)")
    ap.add_argument("--cap", type=int, default=10, help="generate.max_urls_per_host")
    ap.add_argument("--set", action="append", default=[], help="another KEY=VALUE for both crawls")
    ap.add_argument("--only", choices=("off", "on"), help="one of the two crawls (run both side by side)")
    a = ap.parse_args()
    runs = [one(learn, a.rounds, a.cap, a.set) for learn in (False, True) if a.only in (None, "on" if learn else "off")]
    for r in runs:
        print(f"learning {'on ' if r['learn'] else 'off'}: page requests {r['requests']}, distinct 200 pages "
              f"{r['distinct']}, rounds {r['rounds']}, article/brief groups with nothing fetched {len(r['lost'])}, "
              f"wall {r['wall']:.0f} s")
    if len(runs) < 2:
        print(runs[0]["report"])
        return
    off, on = runs
    saved = off["requests"] - on["requests"]
    print(f"fetches saved by learning: {saved} of {off['requests']} ({saved / max(off['requests'], 1):.0%}); "
          f"URLs fetched before their pattern was learnt (each re-crawl cycle saves them): {on['recrawl_saved']}")
    print(on["report"])


if __name__ == "__main__":
    main()
