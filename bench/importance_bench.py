"""Link importance on a real crawl of the test web, against in-degree from other hosts (issue 15).

One crawl of a fresh local test web (ordinary sites, the trap hosts: ``--hosts`` hosts) through the
CLI (``init``, ``inject`` every home page, ``crawl --rounds R``), then ``deltacrawl rank`` with
``--iterations`` power steps (``importance.iterations``). Over the crawl DB's URLs with at least one
in-link, it prints Spearman's rho and Kendall's tau-b between

- ``importance`` and the URL's in-degree from other hosts (distinct source hosts, the links table),
- the discovery ``score`` (what generate ordered by before) and the same in-degree,

and each host kind's share of the total importance against its share of the URLs (a trap host's
generated pages linking to each other should not lift it). Nothing leaves loopback.

    .venv/bin/python -m bench.importance_bench                 # ~3 min on a quiet machine
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testweb import TestWeb  # noqa: E402

KINDS = ["site", "trap"]


def crawl_and_rank(work: Path, *, hosts: int, rounds: int, delay: float, window: float, iterations: int) -> dict:
    from crawl_udfs import config
    from jobs import cli, common
    from jobs.session import build_session

    work.mkdir(parents=True)
    with TestWeb(work / "web", n_hosts=hosts, seed=15, kinds=KINDS) as web:
        overlay = work / "crawl.toml"
        overlay.write_text(
            f'[storage]\nroot = "{work / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {delay}\n[fetch]\ntask_budget_s = {window}\n"
            f"[importance]\nevery_rounds = 0\niterations = {iterations}\n")
        seeds = work / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        kind_of = {h.name: h.kind for h in web.plan.hosts.values()}
        t0 = time.perf_counter()
        for argv in (["init"], ["inject", str(seeds)], ["crawl", "--rounds", str(rounds)]):
            if (rc := cli.main(["--conf", str(overlay)] + argv)) != 0:
                raise SystemExit(f"deltacrawl {' '.join(argv)} exited {rc}")
        crawl_s = time.perf_counter() - t0
        conf = config.load([overlay])
        spark = build_session(conf, app_suffix="bench")
        sc = spark.sparkContext._jsc.sc().dagScheduler()
        jobs0, t0 = sc.numTotalJobs(), time.perf_counter()
        if (rc := cli.main(["--conf", str(overlay), "rank"])) != 0:
            raise SystemExit(f"deltacrawl rank exited {rc}")
        rank = {"seconds": round(time.perf_counter() - t0, 1), "jobs": sc.numTotalJobs() - jobs0}
        urls = {r.url_fp: (r.host, r.importance, r.score)
                for r in common.read(spark, conf, "crawldb").select("url_fp", "host", "importance", "score").collect()}
        links = common.read(spark, conf, "links").where("NOT nofollow").select("src_fp", "dst_fp").distinct().collect()
    return {"urls": urls, "links": [(r.src_fp, r.dst_fp) for r in links], "kind_of": kind_of, "rank": rank,
            "crawl_s": round(crawl_s, 1)}


def judge(run: dict) -> dict:
    from scipy import stats

    urls, kind_of = run["urls"], run["kind_of"]
    sources = collections.defaultdict(set)
    for s, d in run["links"]:
        if s in urls and d in urls and urls[s][0] != urls[d][0]:
            sources[d].add(urls[s][0])
    targets = {d for _, d in run["links"]}
    linked = [k for k in urls if k in targets]
    cross = [len(sources[k]) for k in linked]
    out = {"urls": len(urls), "linked": len(linked), "links": len(run["links"])}
    for name, col in (("importance", 1), ("score", 2)):
        vals = [urls[k][col] for k in linked]
        out[name] = (stats.spearmanr(vals, cross)[0], stats.kendalltau(vals, cross)[0])
    total = sum(v[1] for v in urls.values())
    by_kind = collections.defaultdict(lambda: [0, 0.0])
    for host, imp, _ in urls.values():
        by_kind[kind_of.get(host, "other")][0] += 1
        by_kind[kind_of.get(host, "other")][1] += imp
    out["kinds"] = {k: (n / len(urls), s / total) for k, (n, s) in sorted(by_kind.items())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.2, help="politeness.host_delay_s")
    ap.add_argument("--window", type=float, default=30.0, help="fetch.task_budget_s")
    ap.add_argument("--iterations", type=int, default=20, help="importance.iterations of the one refresh")
    ap.add_argument("--keep", help="keep the crawl under this directory")
    args = ap.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="importance-"))
    try:
        run = crawl_and_rank(work / "crawl0", hosts=args.hosts, rounds=args.rounds, delay=args.delay,
                             window=args.window, iterations=args.iterations)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    j = judge(run)
    print(f"importance_bench: {args.hosts} hosts ({', '.join(KINDS)}), {args.rounds} rounds, crawl {run['crawl_s']} s; "
          f"rank: {args.iterations} iterations, {run['rank']['jobs']} Spark jobs, {run['rank']['seconds']} s")
    print(f"{j['urls']} URLs, {j['linked']} with an in-link, {j['links']} distinct followed links")
    print("| against other-host in-degree | Spearman rho | Kendall tau-b |\n|---|---|---|")
    for name in ("importance", "score"):
        print(f"| {name} | {j[name][0]:.3f} | {j[name][1]:.3f} |")
    print("| host kind | share of URLs | share of importance |\n|---|---|---|")
    for k, (u, i) in j["kinds"].items():
        print(f"| {k} | {u:.1%} | {i:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
