"""Each host's address, learnt inside the fetch task before the host's first request.

The per-IP cap (``politeness.max_in_flight_per_ip``) holds only over hosts whose address
the scheduler knows, so a host must not be leased before its lookup ends. Every host is
held (:meth:`~crawl_udfs.scheduler.PolitenessScheduler.hold`) at once and released by
its own answer, in a future the drive loop runs beside its requests: a host whose name
takes the resolver seconds (or times out, ``fetch.dns_timeout_s``) holds back only itself.

An answer decides the host's fate in this task:
- an address another task of the round fetches (``elsewhere``, from the round's address
  → partition map, ``jobs/fetch.py``): the host is parked ``ADDRESS_ELSEWHERE`` and its
  items deferred untouched, since only that task can cap the address;
- an address: the scheduler caps it; ``run.result.ip`` records it either way;
- a lookup error: the host is parked with the error as reason.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Iterable

from crawl_udfs.host_runs import ADDRESS_ELSEWHERE, HostRun
from crawl_udfs.scheduler import PolitenessScheduler

Resolve = Callable[[str], Awaitable[tuple[str | None, str | None]]]  # name -> (ip, error)


def learn_addresses(runs: Iterable[HostRun], sched: PolitenessScheduler, resolve: Resolve, *,
                    concurrency: int, elsewhere: frozenset[str], wake: Callable[[], None]) -> asyncio.Future:
    """Hold every host now; the future looks each up (``concurrency`` at a time) and unholds it."""
    sem = asyncio.Semaphore(concurrency)
    runs = list(runs)
    for run in runs:
        sched.hold(run.name)

    async def one(run: HostRun) -> None:
        async with sem:
            ip, error = await resolve(run.name)
        if ip is not None:
            run.result.ip = ip
        if ip is not None and ip in elsewhere:
            sched.park(run.name, ADDRESS_ELSEWHERE)
        elif ip is not None:
            sched.set_host(run.name, ip=ip)
        elif error is not None:
            sched.park(run.name, error)
        sched.unhold(run.name)
        wake()  # the host may be leased now

    return asyncio.ensure_future(asyncio.gather(*(one(run) for run in runs)))
