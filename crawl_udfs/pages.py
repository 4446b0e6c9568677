"""Page work: everything after a page's body is in, off the politeness path.

Guarantees:
- **A page's result is its verdict plus the verdict's effects**: :func:`crawl_udfs.classify.classify`
  decides; here the WARC record is written (one exchange at a time, under a lock, its records
  together), the body parsed, its admitted outlinks kept and its main text SimHashed (and, with
  ``dedup.near_duplicates`` on, MinHashed and its words counted for update's near-duplicate
  check). A bug in one page's work becomes that
  page's ``internal`` error row, logged, and never sinks the task.
- **robots.txt responses are stored too** (:meth:`PageWork.store_robots`): each answered request
  of a robots.txt chain is a WARC ``response`` record (the export's ``robotstxt`` subset).
- **At most one page's work per loop turn.** With ``fetch.parse_threads = 0`` one coroutine works
  the queue on the event loop, one page, then yields; with N > 0 the pages go to N threads.
  :meth:`PageWork.hand_over` returns only when its page is done, so the request tasks that wait
  on it bound the pages held in memory by ``fetch.max_concurrency``.
- **Every page handed over is finished** (result and WARC) before :meth:`PageWork.close`
  returns, even when its request task was cancelled by the budget.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from crawl_udfs.classify import Rules, Store, Verdict, admitted, classify
from crawl_udfs.config import Config
from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.parser import parse
from crawl_udfs.responses import header
from crawl_udfs.rows import FetchItem, FetchResult, Outcome, Outlink, RobotsCapture
from crawl_udfs.near_dup import minhash_of
from crawl_udfs.signatures import sha1_digest
from crawl_udfs.simhash import shingled, simhash_of
from crawl_udfs.sitemaps import CHILD_KIND, SITEMAP, URL_KIND, parse_sitemap
from crawl_udfs.url_normalize import CachedNormalizer, fingerprint
from crawl_udfs.warc import HttpExchange, RollingWarcWriter

log = logging.getLogger(__name__)


class PageWork:
    """The page queue (or parse threads) of one task; results go to ``results[id(item)]``."""

    def __init__(self, conf: Config, rules: Rules, link_normalizer: CachedNormalizer,
                 warc: RollingWarcWriter, results: dict[int, FetchResult]):
        self.conf, self.rules, self.warc, self.results = conf, rules, warc, results
        self.link_normalizer = link_normalizer
        self.agent = conf.crawler.agent_name
        self.warc_lock = threading.Lock()
        self.queue: deque = deque()   # (done future, (item, resp, waited, retry_after))
        self.pool: ThreadPoolExecutor | None = None
        self._ready: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        """Start the worker coroutine, or the threads; call inside the task's event loop."""
        threads = self.conf.fetch.parse_threads
        if threads > 0:
            self.pool = ThreadPoolExecutor(threads, thread_name_prefix="deltacrawl-parse")
        else:
            self._ready = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def close(self) -> None:
        """Finish every page handed over, then stop the worker or threads."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self._worker is not None:
            self._worker.cancel()  # it stops at an await, between pages; what is left is done here
            await asyncio.gather(self._worker, return_exceptions=True)
            while self.queue:
                self.page_done(*self.queue.popleft()[1])

    async def hand_over(self, item: FetchItem, resp: FetchResponse, waited: float,
                        retry_after: float | None) -> None:
        """Queue the page's work and wait until it is done."""
        if self.pool is None:
            # Cancelled (the budget), the page still gets done: it stays queued for the worker or close().
            done = asyncio.get_running_loop().create_future()
            self.queue.append((done, (item, resp, waited, retry_after)))
            self._ready.set()
            await done
        else:
            # Shielded: a page handed over is finished (result and WARC) even if this task is cancelled.
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(
                self.pool, self.page_done, item, resp, waited, retry_after))

    async def _work(self) -> None:
        """Work the queue on the loop: one page, then yield, so I/O and timers run in between."""
        queue, ready = self.queue, self._ready
        while True:
            while queue:
                done, args = queue.popleft()
                try:
                    self.page_done(*args)
                except Exception as e:  # a bug: fail the page's request task, which surfaces it
                    if not done.done():
                        done.set_exception(e)
                    raise
                if not done.done():
                    done.set_result(None)
                await asyncio.sleep(0)
            ready.clear()
            await ready.wait()

    def page_done(self, item: FetchItem, resp: FetchResponse, waited: float, retry_after: float | None) -> None:
        """The page's FetchResult: its verdict with the effects applied."""
        try:
            result = self._apply(classify(item, resp, self.rules), item, resp)
        except Exception as e:  # a bug in one page's work must not sink the task
            log.exception("internal error on %s", item.url)
            result = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host, outcome=Outcome.ERROR.value,
                                 fetch_time=resp.started_at, status_code=resp.status, error_class="internal",
                                 error_message=f"{type(e).__name__}: {e}"[:500], redirect_hops=item.redirect_hops)
        result.politeness_wait_ms = waited
        result.retry_after_s = retry_after
        self.results[id(item)] = result

    def store_robots(self, owner: str, url: str, resp: FetchResponse) -> RobotsCapture:
        """Write one robots.txt response (a hop of ``owner``'s chain) as a WARC response record."""
        digest = sha1_digest(resp.body)
        with self.warc_lock:
            ptr = self.warc.write_exchange(_exchange(url, resp), payload_digest=digest)
        ctype = (header(resp.headers, "content-type") or "").split(";")[0].strip().lower() or None
        return RobotsCapture(host=owner, url=url, fetch_time=resp.started_at, status_code=resp.status,
                             ip=resp.ip, content_type=ctype, content_length=len(resp.body),
                             truncated=resp.truncated, digest=digest, warc_filename=ptr.filename,
                             warc_offset=ptr.offset, warc_length=ptr.length, warc_record_id=ptr.record_id)

    def _apply(self, verdict: Verdict, item: FetchItem, resp: FetchResponse) -> FetchResult:
        r = verdict.row
        if verdict.store is not Store.NOTHING:
            exchange = _exchange(item.url, resp)
            with self.warc_lock:
                if verdict.store is Store.EXCHANGE:
                    ptr = self.warc.write_exchange(exchange, payload_digest=r.digest)
                else:  # a revisit of the stored copy: a 304, or a payload identical to it
                    ptr = self.warc.write_revisit(
                        exchange, refers_to=item.prev_warc_record_id, refers_to_uri=item.url,
                        refers_to_date=item.prev_fetch_time,
                        payload_digest=r.digest if verdict.store is Store.IDENTICAL else None)
                    r.warc_refers_to = item.prev_warc_record_id
            r.warc_filename, r.warc_offset, r.warc_length, r.warc_record_id = (
                ptr.filename, ptr.offset, ptr.length, ptr.record_id)
        if verdict.parse and item.fetch_kind == SITEMAP:
            self._read_sitemap(r, item, resp)
        elif verdict.parse:
            parsed = parse(resp.body, url=item.url, content_type=verdict.content_type, headers=r.headers,
                           normalizer=self.link_normalizer, parse_conf=self.conf.parse, agent_name=self.agent)
            r.charset, r.title, r.canonical = parsed.charset, parsed.title, parsed.canonical
            r.noindex, r.nofollow = parsed.noindex, parsed.nofollow
            r.outlinks, r.outlinks_filtered = admitted(parsed.outlinks, item, self.rules)
            if parsed.is_html and parsed.main_text.strip():
                # the main text tokenised once for all three (simhash.shingled)
                n_words, features = shingled(parsed.main_text, self.conf.simhash.shingle_words)
                r.simhash = simhash_of(features)
                if self.conf.dedup.near_duplicates:  # only update's near-duplicate lookup reads them
                    r.minhash = minhash_of(set(features), self.conf.dedup.minhash_permutations)
                    r.words = n_words
        return r

    def _read_sitemap(self, r: FetchResult, item: FetchItem, resp: FetchResponse) -> None:
        """A sitemap's entries as outlinks (URLs with their lastmod, child sitemaps), through URL admission;
        why the file was cut or refused goes to ``error_message`` (the fetch log's)."""
        c = self.conf.sitemaps
        sm = parse_sitemap(resp.body, host=item.host, depth=item.depth, normalize=self.link_normalizer.normalize,
                           base_url=item.url, max_urls=c.max_urls, max_bytes=c.max_bytes,
                           max_index_depth=c.max_index_depth, not_after=resp.started_at)
        links = [Outlink(url=e.url, url_fp=fingerprint(e.url), kind=URL_KIND, host=item.host, lastmod=e.lastmod)
                 for e in sm.urls]
        links += [Outlink(url=e.url, url_fp=fingerprint(e.url), kind=CHILD_KIND, host=item.host)
                  for e in sm.children]
        r.outlinks, filtered = admitted(links, item, self.rules)
        r.outlinks_filtered = filtered + sm.foreign
        if sm.reason is not None:
            r.error_message = f"sitemap: {sm.reason}"


def _exchange(url: str, resp: FetchResponse) -> HttpExchange:
    """The WARC exchange of a response to ``url`` (the body as stored: decoded)."""
    return HttpExchange(url=url, ip=resp.ip, fetch_time=resp.started_at, method="GET",
                        request_target=resp.request_target, request_headers=resp.request_headers,
                        http_version=resp.http_version or "1.1", status=resp.status, reason=resp.reason or "",
                        response_headers=resp.headers, body=resp.body, truncated=resp.truncated)
