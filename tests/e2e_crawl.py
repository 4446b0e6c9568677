"""The suite's shared multi-round crawl of the test web: 3 rounds over 50 hosts of every hard kind.

Built once per test session (the ``e2e_crawl`` fixture in ``tests/conftest.py``) and read by
``test_e2e_crawl`` (politeness, ledger, budgets, idempotence) and ``test_sql`` (the README's queries):
a second crawl of the test web for another module is minutes of CI for nothing.
"""

from __future__ import annotations

from jobs import cli
from tests.testweb import TestWeb

DELAY = 0.5
ROUNDS = 3
BUDGET_PAGES = 8


def crawl(d):
    """Yield (web, conf, base CLI args, request log, politeness violations) of the crawl under ``d``;
    the test web serves until the generator is closed."""
    with TestWeb(d / "web", n_hosts=50, seed=21, kinds=["site", "robots", "trap", "dup"]) as web:
        overlay = d / "e2e.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 25.0\ntotal_timeout_s = 6.0\n"
            f"[budget]\nmax_pages_per_host = {BUDGET_PAGES}\n"
            "[generate]\nmax_urls_per_host = 4\nfetch_partitions = 2\n")
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
