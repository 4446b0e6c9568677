"""The crawl-DB slice update reads once (jobs/crawldb_slice.py): which rows, which columns (small DataFrames)."""

from __future__ import annotations

import pytest

from jobs import crawldb_slice as S
from schemas.tables import CRAWLDB, FETCH_OUTPUT
from tests.test_update import frame, link, old, page

pytestmark = pytest.mark.spark


def test_the_slice_holds_the_rounds_urls_and_link_targets_whole_and_its_hosts_rows_narrow(spark):
    u, other = "http://s.test/", "http://o.test/"
    db = [old(u, digest="sha1:P"), old(u + "known", digest="sha1:K"), old(other + "target", digest="sha1:T"),
          old(u + "sibling", status="duplicate", dup_of=7, digest="sha1:S"), old(other + "far", digest="sha1:F"),
          old("http://hostonly.test/x", digest="sha1:H")]
    out = [page(u, "ok", outlinks=[link(u + "known"), link(other + "target"), link(other + "absent")]),
           dict(round=1, partition=0, kind="host", host="hostonly.test")]
    got = {r.url: r for r in S.round_slice(frame(spark, db, CRAWLDB), frame(spark, out, FETCH_OUTPUT)).collect()}
    # by URL (the page, its known link targets on any host): every column; by host only: HOST_COLUMNS
    assert set(got) == {u, u + "known", other + "target", u + "sibling", "http://hostonly.test/x"}
    assert [got[x].digest for x in (u, u + "known", other + "target")] == ["sha1:P", "sha1:K", "sha1:T"]
    assert (got[u + "sibling"].digest, got[u + "sibling"].status, got[u + "sibling"].dup_of) == (None, "duplicate", 7)
    assert got["http://hostonly.test/x"].digest is None and got["http://hostonly.test/x"].host == "hostonly.test"
    assert S.round_slice(frame(spark, db, CRAWLDB), frame(spark, out, FETCH_OUTPUT)).columns == CRAWLDB.names
