"""Link importance (jobs/importance.py): a link farm gains nothing, importance follows other hosts' links,
and the refresh writes only crawldb.importance, in a bounded number of Spark jobs."""

from __future__ import annotations

import collections
import random

import pytest

from crawl_udfs import config
from jobs import importance

pytestmark = pytest.mark.spark

D, S, C = 0.85, 0.25, 20  # damping, intra_host_share, spread_host_pages (the defaults)


def fp(url: str) -> int:
    from crawl_udfs.url_normalize import fingerprint
    return fingerprint(url)


def graph(spark, links: list[tuple[str, str]], extra_urls: tuple[str, ...] = ()):
    """(links, nodes) DataFrames for ``links`` (src URL, dst URL); every URL named is a node."""
    from crawl_udfs.url_normalize import host_of
    urls = sorted({u for pair in links for u in pair} | set(extra_urls))
    nodes = spark.createDataFrame([(fp(u), host_of(u), None) for u in urls], "url_fp long, host string, importance double")
    edges = spark.createDataFrame([(fp(a), fp(b), False) for a, b in links], "src_fp long, dst_fp long, nofollow boolean")
    return edges, nodes, urls


def ranked(spark, links, extra=(), *, intra_host_share=S, iterations=6, cap=C) -> dict[str, float]:
    edges, nodes, urls = graph(spark, links, extra)
    got = importance.importance(edges, nodes, damping=D, intra_host_share=intra_host_share, iterations=iterations,
                                sizes=importance.sizes(nodes, host_pages=cap)).collect()
    by_fp = {r.url_fp: r.importance for r in got}
    return {url: by_fp[fp(url)] for url in urls}


def farm_web() -> tuple[list[tuple[str, str]], str, str]:
    """Five honest hosts, each page linking to its home; three of them link to lone.test/page. And a farm:
    40 pages of farm.test, each linking to farm.test/target and to the next farm page."""
    links = []
    for h in ("a", "b", "c", "d", "e"):
        links += [(f"http://{h}.test/{i}", f"http://{h}.test/") for i in range(4)]
    links += [(f"http://{h}.test/1", "http://lone.test/page") for h in ("a", "b", "c")]
    farm = [f"http://farm.test/{i}" for i in range(40)]
    links += [(p, "http://farm.test/target") for p in farm]
    links += [(p, farm[(i + 1) % len(farm)]) for i, p in enumerate(farm)]
    return links, "http://farm.test/target", "http://lone.test/page"


def test_a_link_farm_gains_nothing_from_linking_to_itself(spark):
    links, target, lone = farm_web()
    imp = ranked(spark, links)
    per_host = collections.Counter(u.split("/")[2] for u in imp)
    farm_total = sum(v for u, v in imp.items() if "//farm.test/" in u)
    # the guarantee: no link from another host, so the farm holds at most its spread / (1 - D x S); its
    # spread: its 41 URLs counted as C of the weight sum(min(URLs, C)) over the hosts
    spread = (1 - D) * len(imp) * min(per_host["farm.test"], C) / sum(min(n, C) for n in per_host.values())
    assert farm_total <= spread / (1 - D * S) + 1e-9
    # three links from three other hosts beat forty from its own
    assert imp[lone] > imp[target]
    assert imp[lone] == max(v for u, v in imp.items() if "//farm.test/" not in u and not u.endswith(".test/"))
    # plain PageRank on the same graph (spread over pages, links to its own host count in full): the farm wins
    plain = pagerank(links)
    assert plain[target] > 3 * plain[lone]
    assert sum(v for u, v in plain.items() if "//farm.test/" in u) > 2 * spread


def test_the_spread_goes_to_pages_up_to_a_host_cap_so_a_lone_url_gets_no_host_share(spark):
    # no links: importance is the spread alone. Three hosts of 10 pages, one of 50, five known by one URL each
    urls = ([f"http://s{h}.test/{i}" for h in range(3) for i in range(10)] + [f"http://big.test/{i}" for i in range(50)]
            + [f"http://lone{h}.test/" for h in range(5)])
    imp = ranked(spark, [], urls, cap=20)
    assert abs(sum(imp.values()) - (1 - D) * len(urls)) < 1e-9  # no link: nothing but the spread, (1 - D) x URLs
    page = imp["http://s0.test/0"]
    # a host under the cap: every page the same part, a lone URL included (it used to get a 10-page host's part)
    assert all(abs(imp[u] - page) < 1e-12 for u in urls if "big.test" not in u)
    # a host over the cap: 20 pages' part in all, shared by its 50
    assert abs(sum(v for u, v in imp.items() if "big.test" in u) - 20 * page) < 1e-9
    # the cap at 1 is every host the same part: the lone URL holds a whole host's
    same = ranked(spark, [], urls, cap=1)
    assert abs(same["http://lone0.test/"] - 10 * same["http://s0.test/0"]) < 1e-9


def pagerank(links: list[tuple[str, str]], iterations: int = 50) -> dict[str, float]:
    """Page et al.'s PageRank in plain Python, scaled to a mean of 1: the reference without host damping."""
    urls = sorted({u for pair in links for u in pair})
    out = {u: sorted({b for a, b in links if a == u and b != u}) for u in urls}
    r = dict.fromkeys(urls, 1.0)
    for _ in range(iterations):
        dangling = sum(r[u] for u in urls if not out[u])
        nxt = dict.fromkeys(urls, (1 - D) + D * dangling / len(urls))
        for u in urls:
            for v in out[u]:
                nxt[v] += D * r[u] / len(out[u])
        r = nxt
    return r


def _spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):  # ties share their mean rank
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def test_importance_follows_links_from_other_hosts(spark):
    # 12 hosts of 5 pages; each page links to its home and to 3 pages elsewhere, chosen with a skew
    # (page k of a host is picked with weight 1/(k+1)); every host also links to a few of its own pages
    rnd = random.Random(7)
    pages = [f"http://h{h}.test/{k}" for h in range(12) for k in range(5)]
    weights = [1 / (int(p.rsplit("/", 1)[1]) + 1) for p in pages]
    links = []
    for p in pages:
        host = p.split("/")[2]
        links.append((p, f"http://{host}/0"))
        others = [q for q in pages if q.split("/")[2] != host]
        for q in rnd.choices(others, weights=[weights[pages.index(q)] for q in others], k=3):
            links.append((p, q))
    imp = ranked(spark, links)
    cross = {u: len({a.split("/")[2] for a, b in links if b == u and a.split("/")[2] != u.split("/")[2]})
             for u in imp}
    rho = _spearman([imp[u] for u in pages], [cross[u] for u in pages])
    assert rho > 0.8, rho


# -- the refresh on Delta --------------------------------------------------------------------------------

def test_refresh_writes_importance_only_and_update_keeps_it(spark, tmp_path):
    from tests.summary import LINES

    from jobs import common, update_commit
    from jobs import crawldb_rows as CR
    from schemas.tables import CRAWLDB
    from tests.test_generate import url_row
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4",
                                  "importance.iterations=3", "importance.every_rounds=2"])
    # only the two tables it reads, created by their first append (ensure_tables makes all nine)
    links, _, _ = farm_web()
    edges, nodes, urls = graph(spark, links)
    rows = [url_row(u) for u in urls]
    common.conform(spark.createDataFrame(rows, CRAWLDB), common.TABLES["crawldb"]).write.format("delta") \
        .mode("append").save(common.table_path(conf, "crawldb"))
    link_rows = edges.selectExpr("1L AS round", "src_fp", "dst_fp", "'a' AS kind", "nofollow", "'x' AS dst_url")
    common.conform(link_rows, common.TABLES["links"]).write.format("delta").mode("append") \
        .save(common.table_path(conf, "links"))
    before = {r.url_fp: r for r in common.read(spark, conf, "crawldb").collect()}

    sc = spark.sparkContext._jsc.sc().dagScheduler()
    first = sc.numTotalJobs()
    assert importance.run(spark, conf) == {"ranked_urls": len(urls), "ranked_hosts": 7}
    jobs = sc.numTotalJobs() - first
    LINES.append(f"importance.run on {len(urls)} URLs, 3 iterations: {jobs} Spark jobs")
    assert jobs <= JOBS_MAX, jobs

    want = {r.url_fp: r.importance for r in importance.importance(
        edges, nodes, damping=D, intra_host_share=S, iterations=3,
        sizes=importance.sizes(nodes, host_pages=C)).collect()}
    after = {r.url_fp: r for r in common.read(spark, conf, "crawldb").collect()}
    assert {k: round(r.importance, 9) for k, r in after.items()} == {k: round(v, 9) for k, v in want.items()}
    assert all(after[k].asDict() | {"importance": None} == before[k].asDict() for k in before)

    # update's write of a fetched URL leaves the importance it does not own
    k = fp("http://farm.test/target")
    src = (common.read(spark, conf, "crawldb").where(f"url_fp = {k}")
           .selectExpr(*[f"{c} AS {c}" if c not in ("importance", "updated_round", "status") else
                         {"importance": "CAST(NULL AS double) AS importance", "updated_round": "5L AS updated_round",
                          "status": "'fetched' AS status"}[c] for c in (f.name for f in CRAWLDB.fields)],
                       "'update' AS _kind", "status AS _was"))
    update_commit.replace_crawldb(spark, conf, CR.whole_rows(src, common.read(spark, conf, "crawldb")), 5, "test")
    row = common.read(spark, conf, "crawldb").where(f"url_fp = {k}").collect()[0]
    assert (row.status, row.updated_round, row.importance) == ("fetched", 5, after[k].importance)
    assert (importance.due(conf, 4), importance.due(conf, 5)) == (True, False)


#: Spark jobs of one refresh on a tiny table (sizes, the staged iterations, the MERGE; measured 2026-12-03:
#: 20 here, 34 on tables made by ensure_tables (deletion vectors on), 48 with adaptive execution on).
JOBS_MAX = 40
