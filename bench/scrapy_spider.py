"""The Scrapy side of ``bench/crawl_vs_scrapy.py``: a generic broad-crawl spider, run in the bench venv.

Run by the benchmark as ``bench/.venv-scrapy/bin/python bench/scrapy_spider.py --seeds F --hosts-map F
--delay D --seconds T``; it imports only Scrapy (the bench venv has none of the project's dependencies).

What it is: the spider a new user would write for a broad crawl (every seed's home page, every link
followed, nothing extracted), under the settings Scrapy's "Broad Crawls" page recommends
(docs.scrapy.org/en/2.19/topics/broad-crawls) plus the politeness a polite crawl asks of it:
``ROBOTSTXT_OBEY``, ``DOWNLOAD_DELAY`` = the host delay, one request per domain. Its Scrapy defaults
stand (``RANDOMIZE_DOWNLOAD_DELAY``: 0.5-1.5 x the delay between request starts; no Crawl-delay, no
Retry-After, no per-IP cap): the benchmark measures Scrapy as its users run it.

Three settings are the benchmark's, not Scrapy's advice, and each keeps the comparison fair or the machine safe:
- ``ROBOTSTXT_USER_AGENT = "deltacrawl"``: the test web judges robots.txt for that product token, so
  Scrapy follows the same group the server holds it to;
- ``DOWNLOAD_MAXSIZE`` = deltacrawl's ``fetch.max_body_bytes`` (5 MiB): the same body cap (Scrapy's
  own 1 GiB would decode the test web's 1 GiB bombs into memory on a shared machine);
- only loopback traffic, by two pieces below: a resolver that answers from the test web's hosts file
  and only for its 127.10.0.0/16 addresses, and a downloader middleware (first in the chain, before
  robots.txt is asked for) that drops every request to a host not in that map (IP literals, bait
  names, nxdomain hosts), as deltacrawl's SSRF guard does.
"""

from __future__ import annotations

import argparse
import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import IgnoreRequest
from scrapy.linkextractors import LinkExtractor
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
from twisted.internet.error import DNSLookupError

BODY_CAP_BYTES = 5 * 2**20  # = deltacrawl's fetch.max_body_bytes default


def broad_crawl_settings(delay_s: float, seconds: float, hosts_map: str) -> dict:
    """Scrapy's documented broad-crawl settings, the politeness asked of it, and the bench's three."""
    return {
        # "Broad Crawls" (docs.scrapy.org/en/2.19/topics/broad-crawls), in the page's order
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "CONCURRENT_REQUESTS": 100,
        "REACTOR_THREADPOOL_MAXSIZE": 20,
        "LOG_LEVEL": "INFO",
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "DOWNLOAD_TIMEOUT": 15,
        "REDIRECT_ENABLED": False,
        "AJAXCRAWL_ENABLED": True,
        "DEPTH_PRIORITY": 1,  # "crawl in BFO order" (saves memory on broad crawls)
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        # politeness
        "ROBOTSTXT_OBEY": True,
        "DOWNLOAD_DELAY": delay_s,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        # the benchmark's own (module docstring)
        "ROBOTSTXT_USER_AGENT": "deltacrawl",
        "USER_AGENT": "scrapy-bench/2.19 (+http://127.0.0.1/bench)",
        "DOWNLOAD_MAXSIZE": BODY_CAP_BYTES,
        "TWISTED_DNS_RESOLVER": f"{__name__}.HostsFileResolver",
        "DOWNLOADER_MIDDLEWARES": {f"{__name__}.LoopbackOnly": 50},
        "BENCH_HOSTS_MAP": hosts_map,
        "CLOSESPIDER_TIMEOUT": seconds,
        "TELNETCONSOLE_ENABLED": False,  # no console port opened (nor the remote-control one below)
        "REMOTE_CONTROL_ENABLED": False,
    }


def _load_map(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class HostsFileResolver(CachingThreadedResolver):
    """Answers from the bench's host -> address map only; any other name fails as NXDOMAIN would."""

    @classmethod
    def from_crawler(cls, crawler, reactor):
        r = super().from_crawler(crawler, reactor)
        r.hosts = _load_map(crawler.settings["BENCH_HOSTS_MAP"])
        return r

    def getHostByName(self, name, timeout=()):
        addr = self.hosts.get(name.lower())
        return defer.succeed(addr) if addr else defer.fail(DNSLookupError(name))


class LoopbackOnly:
    """Drops every request whose host is not in the map, before anything (robots.txt included) is fetched."""

    def __init__(self, hosts: dict[str, str]):
        self.hosts = hosts

    @classmethod
    def from_crawler(cls, crawler):
        return cls(_load_map(crawler.settings["BENCH_HOSTS_MAP"]))

    def process_request(self, request, spider=None):
        from urllib.parse import urlsplit

        if (urlsplit(request.url).hostname or "").lower() not in self.hosts:
            raise IgnoreRequest(f"not a test-web host: {request.url}")
        return None


class BroadSpider(scrapy.Spider):
    """Every seed, then every link of every HTML page (Scrapy's dupe filter drops repeats)."""

    name = "broad"

    def __init__(self, seeds_file: str, **kw):
        super().__init__(**kw)
        with open(seeds_file, encoding="utf-8") as f:
            self.start_urls = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        self.links = LinkExtractor()

    def parse(self, response):
        if not isinstance(response, scrapy.http.HtmlResponse):
            return
        for link in self.links.extract_links(response):
            yield response.follow(link.url, callback=self.parse)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seeds", required=True, help="one URL a line")
    ap.add_argument("--hosts-map", required=True, help="JSON object host -> loopback address")
    ap.add_argument("--delay", type=float, required=True, help="DOWNLOAD_DELAY, seconds")
    ap.add_argument("--seconds", type=float, required=True, help="CLOSESPIDER_TIMEOUT, seconds")
    args = ap.parse_args(argv)
    process = CrawlerProcess(broad_crawl_settings(args.delay, args.seconds, args.hosts_map))
    process.crawl(BroadSpider, seeds_file=args.seeds)
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
