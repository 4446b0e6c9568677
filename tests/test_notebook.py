"""notebooks/freshness.ipynb runs on a small real crawl of the test web and draws its four figures.

The crawl: the test web's live hosts alone (tests/testweb/live.py: pages whose main text changes as Poisson
processes at known rates), three rounds under the nutch policy with intervals of seconds, so every page is
re-visited twice; through the CLI in the suite's Spark session. The notebook then runs in its own kernel
(nbclient, this interpreter), so its Spark session is a second JVM beside the suite's (local[1]), reading
the committed tables; the test hands it the true rates as a CSV, as an operator who knew them would.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobs import cli, common
from tests.summary import note
from tests.urls import normalize
from tests.testweb import TestWeb

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "freshness.ipynb"
ROUNDS = 3  # a first visit and two re-visits of every live page
FIGURES = ("change_rates", "intervals", "wasted", "staleness")
#: Two live hosts of 12 pages changing at known rates from once in 4 s to once in 1000 s: the range of the
#: gaps between rounds (tens of seconds in CI, minutes on a loaded machine).
LIVE = dict(live_hosts=2, live_pages=12, live_rate_min=1 / 1000, live_rate_max=1 / 4)
#: Seconds between one round's end and the next one's start: the gaps between visits stay tens of seconds
#: however fast a round is (session 20's quicker rounds, ~10 s apart, left the pages slower than 1/100 s
#: unchanged at every visit and the rank correlation at 0.59).
PAUSE_S = 15.0


@pytest.fixture(scope="module")
def crawled(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("freshness")
    with TestWeb(d / "web", n_hosts=0, seed=5, kinds=[], knobs=LIVE) as web:
        overlay = d / "crawl.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            "[politeness]\nhost_delay_s = 0.05\n"
            "[fetch]\ntask_budget_s = 20.0\n"
            # every page due again by the next round: Nutch's intervals grow from 1 s by x1.4 a visit
            '[schedule]\npolicy = "nutch"\ndefault_interval_s = 1.0\nmin_interval_s = 1.0\n'
            "[dedup]\nnear_duplicates = false\nlearn_patterns = false\n"
            "[generate]\nfetch_partitions = 1\n"
            "[spark]\nshuffle_partitions = 2\n")
        seeds = d / "seeds.txt"
        seeds.write_text("".join(f"http://{h}:{web.port}/\n" for h in sorted({h for h, _ in web.live.keys()})))
        base = ["--conf", str(overlay)]
        t0 = time.monotonic()
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        for i in range(ROUNDS):
            if i:
                time.sleep(PAUSE_S)
            assert cli.main(base + ["crawl", "--rounds", "1"]) == 0
        crawl_s = time.monotonic() - t0
        yield web, overlay, d, crawl_s


@pytest.fixture(scope="module")
def executed(crawled):
    import nbformat
    from nbclient import NotebookClient

    web, overlay, d, crawl_s = crawled
    out = d / "figures"
    truth = d / "true_rates.csv"  # what the test web states, keyed as the crawl DB keys URLs
    truth.write_text("url,rate_per_s\n" + "".join(f"{normalize(u)},{web.live.rate(u)!r}\n" for u in web.live.urls()))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    params[0].source += ("\n# injected by tests/test_notebook.py\n"
                         f"conf_files = [{str(overlay)!r}]\ncrawl_root = None\nout_dir = {str(out)!r}\n"
                         f"true_rates_csv = {str(truth)!r}\n"
                         'spark_master = "local[1]"\noverrides = ["spark.shuffle_partitions=2"]\n')
    t0 = time.monotonic()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(d)}}).execute()
    summary = json.loads((out / "summary.json").read_text())
    note(f"freshness notebook: crawl of {ROUNDS} rounds {crawl_s:.0f} s ({PAUSE_S:.0f} s between them), "
         f"notebook {time.monotonic() - t0:.0f} s, rank correlation of the rates {summary['rate_spearman']:.2f}")
    return nb, out, summary


def test_the_figures_are_drawn(executed):
    import matplotlib.image as mpimg
    import numpy as np

    nb, out, summary = executed
    for name in FIGURES:
        path = out / summary["figures"][name]
        assert path.stat().st_size > 10_000, path
        img = mpimg.imread(path)
        colours = np.unique(img.reshape(-1, img.shape[-1]).round(2), axis=0)
        assert len(colours) > 50, (name, len(colours))  # drawn, not a blank canvas


def test_estimated_rates_follow_the_true_rates(executed):
    nb, out, summary = executed
    assert summary["pages_judged"] >= 20  # the live pages, each re-visited twice
    assert summary["rate_spearman"] >= 0.6, summary


def test_the_wasted_share_is_the_fetch_logs(spark, crawled, executed):
    web, overlay, d, crawl_s = crawled
    nb, out, summary = executed
    from crawl_udfs import config
    conf = config.load([overlay])
    rows = spark.read.format("delta").load(common.table_path(conf, "fetch_log")).where("changed IS NOT NULL").collect()
    assert len(rows) > 20
    assert summary["wasted_share"] == pytest.approx(sum(not r["changed"] for r in rows) / len(rows))


def test_staleness_of_the_policies(executed):
    nb, out, summary = executed
    rows = summary["staleness"]
    assert len(rows) >= 5
    for r in rows:
        assert r["optimal"] <= r["fixed"] + 1e-9  # the optimum at the same budget is never worse
        assert r["fixed_simulated"] == pytest.approx(r["fixed"], abs=0.03)  # the simulator agrees with the formula
    assert rows[0]["fixed"] < rows[-1]["fixed"]  # more budget, fresher
