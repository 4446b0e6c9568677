"""Command line: ``python -m tests.testweb serve --n-hosts 50 --dir DIR`` runs the test web standalone;
``python -m tests.testweb plan --n-hosts 50`` prints the plan (host, kind, variant, address, robots, pages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from .model import Knobs
from .server import serve
from .sites import build_plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.testweb")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("serve", "plan"):
        p = sub.add_parser(name)
        p.add_argument("--n-hosts", type=int, default=50)
        p.add_argument("--seed", type=int, default=7)
        p.add_argument("--kinds", default=None, help="comma-separated kinds (default: all; \"\": none)")
        p.add_argument("--knobs", default="{}", help="JSON object of Knobs fields")
        p.add_argument("--port", type=int, default=0, help="0: a free one")
    s = sub.choices["serve"]
    s.add_argument("--dir", required=True, type=Path, help="where hosts, requests.jsonl and ready.json go")
    s.add_argument("--log", type=Path, default=None, help="request log (default DIR/requests.jsonl)")
    s.add_argument("--cache-dir", type=Path, default=None, help="where compression bombs are cached")
    s.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    args = ap.parse_args(argv)
    kinds = None if args.kinds is None else tuple(k for k in args.kinds.split(",") if k)
    knobs = Knobs(**json.loads(args.knobs))
    if args.cmd == "plan":
        plan = build_plan(args.n_hosts, args.seed, args.port or 8080, kinds, knobs)
        for h in plan.hosts.values():
            size = "inf" if h.infinite else len(h.pages)
            print(f"{h.name:32} {h.kind:8} {h.variant:18} {h.address:15} robots={h.robots_variant:17} pages={size}")
        return 0
    try:
        asyncio.run(serve(args.n_hosts, args.seed, args.dir, args.port or None, kinds, knobs, args.log,
                          args.cache_dir, args.parent_pid or None, announce=print))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
