"""The README's demo: a few rounds against the project's own local test web.

Starts the test web (virtual hosts on 127.10.x.y, see tests/testweb), writes a
configuration overlay pointing deltacrawl at it, then runs the same commands
a user would: init, inject, crawl, status, report. The tables stay in ./demo-data.
Exits 1 when the server-side check of the test web's log finds a violation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawl_udfs import config  # noqa: E402
from tests.testweb import TestWeb  # noqa: E402
from tests.testweb.analysis import Violations  # noqa: E402

DATA = ROOT / "demo-data"
ROUNDS = int(os.environ.get("DEMO_ROUNDS", "3"))


def run(*args: str, last_line: bool = False) -> None:
    """Run the command as a user would, echoed; ``last_line``: print only its output's last line."""
    cmd = [str(ROOT / ".venv" / "bin" / "deltacrawl"), "--conf", str(DATA / "demo.toml"), *args]
    print("$ deltacrawl --conf demo-data/demo.toml " + " ".join(f'"{a}"' if " " in a else a for a in args), flush=True)
    if last_line:
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        print(out.strip().splitlines()[-1], flush=True)
    else:
        subprocess.run(cmd, check=True)


def problems(v: Violations) -> list[str]:
    """What the server-side check found wrong (politeness gaps, per-address in flight, robots.txt,
    Retry-After, SSRF bait: ``Violations.clean``), one phrase each."""
    if v.clean:
        return []
    found = [f"{len(v.too_close) + len(v.overlapping)} politeness gap(s)"] if v.too_close or v.overlapping else []
    found += [f"{n} requests in flight to {a}, cap {v.max_in_flight_per_addr}" for a, n in v.crowded_addrs.items()]
    found += [f"{len(x)} {what}" for what, x in (("robots.txt violation(s)", v.disallowed),
                                                  ("request(s) inside Retry-After", v.retry_after),
                                                  ("SSRF bait request(s)", v.bait)) if x]
    return found


def main() -> int:
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    with TestWeb(DATA / "testweb", n_hosts=60, seed=7, kinds=["site", "robots", "trap", "dup"]) as web:
        (DATA / "demo.toml").write_text(
            "# deltacrawl demo overlay: the local test web, small budgets\n"
            f'[storage]\nroot = "{DATA / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = {list(web.allow_cidrs)!r}\n'.replace("'", '"')
            + "[fetch]\ntask_budget_s = 40.0\ntotal_timeout_s = 10.0\n"
            "[generate]\nmax_urls_per_host = 8\nfetch_partitions = 2\n"
            "[spark]\nmaster = \"local[2]\"\nshuffle_partitions = 4\n")
        (DATA / "seeds.txt").write_text("# the test web's home pages\n" + "\n".join(web.seeds()) + "\n")
        run("init")
        run("inject", str(DATA / "seeds.txt"))
        run("crawl", "--rounds", str(ROUNDS))
        run("status")
        run("report", last_line=True)
        conf = config.load([DATA / "demo.toml"])
        v = web.violations(host_delay_s=conf.politeness.host_delay_s,
                           max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
        print("\nserver-side politeness check: " + v.summary().replace("\n", "\n  "))
    found = problems(v)
    if found:
        print("\nFAILED: " + "; ".join(found), file=sys.stderr)
        return 1
    print("\nThe tables are in demo-data/crawl. Try:\n"
          '  .venv/bin/deltacrawl --conf demo-data/demo.toml sql '
          '"SELECT status, count(*) AS urls FROM crawldb GROUP BY status ORDER BY urls DESC"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
