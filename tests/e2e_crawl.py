"""The suite's shared multi-round crawl of the test web: 3 rounds over 56 hosts of every hard kind.

Built once per test session (the ``e2e_crawl`` fixture in ``tests/conftest.py``) and read by
``test_e2e_crawl`` (politeness, ledger, budgets, idempotence), ``test_sql`` (the README's queries) and
``test_sitemaps_crawl`` (the six sitemap hosts, with ``sitemaps.enabled``): a second crawl of the test
web for another module is minutes of CI for nothing.

With sitemaps on, every host's ``/sitemap.xml`` (and the sitemaps its robots.txt names) becomes a
crawl-DB row after round 1 and is fetched in round 2 as a request of its host, within its budget;
the 50 hosts of the other kinds are the ones the crawl had before the sitemap hosts joined (the plan
adds opt-in kinds last, so the ordinary sites keep their names).
"""

from __future__ import annotations

from jobs import cli
from tests.testweb import TestWeb

DELAY = 0.5
ROUNDS = 3
BUDGET_PAGES = 8
#: sitemaps.max_urls: below sitemap-cap.test's SITEMAP_CAP_URLS, so that sitemap is cut at the cap
SITEMAP_MAX_URLS = 50
#: sitemaps.max_index_depth: sitemap-index.test's second-level index (/sm/index2.xml) lists no child kept
SITEMAP_INDEX_DEPTH = 1


def crawl(d):
    """Yield (web, conf, base CLI args, request log, politeness violations) of the crawl under ``d``;
    the test web serves until the generator is closed."""
    with TestWeb(d / "web", n_hosts=56, seed=21, kinds=["site", "robots", "trap", "dup", "sitemap"]) as web:
        overlay = d / "e2e.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 25.0\ntotal_timeout_s = 6.0\n"
            f"[budget]\nmax_pages_per_host = {BUDGET_PAGES}\n"
            "[generate]\nmax_urls_per_host = 4\nfetch_partitions = 2\n"
            f"[sitemaps]\nenabled = true\nmax_urls = {SITEMAP_MAX_URLS}\nmax_index_depth = {SITEMAP_INDEX_DEPTH}\n")
        seeds = d / "seeds.txt"
        seeds.write_text("# seeds\n" + "\n".join(web.seeds()) + "\nnot a url\n")
        base = ["--conf", str(overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        assert cli.main(base + ["crawl", "--rounds", str(ROUNDS)]) == 0
        from crawl_udfs import config
        conf = config.load([overlay])
        yield web, conf, base, web.log(), web.violations(host_delay_s=DELAY,
                                                         max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
