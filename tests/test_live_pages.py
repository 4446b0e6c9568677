"""The test web's live pages (tests/testweb/live.py) and the server-side staleness judge
(tests/testweb/staleness.py): pure tests, plus one short start of the server for its 304s and log."""

from __future__ import annotations

import http.client
import math
import time
from email.utils import formatdate

import pytest

from crawl_udfs import change_rate as R
from tests.testweb import TestWeb, build_plan
from tests.testweb.live import LiveWeb, not_modified
from tests.testweb.model import Knobs
from tests.testweb import staleness as S

EPOCH = 1_800_000_000.25


def model(**kw) -> LiveWeb:
    args = dict(seed=3, hosts=2, pages=10, rate_min=1 / 2000, rate_max=1 / 20, time_scale=1.0, epoch=EPOCH)
    return LiveWeb(**{**args, **kw})


def test_rates_spread_log_uniformly_over_the_range_and_scale_with_time():
    rates = sorted(model().rates().values())
    assert len(rates) == 20
    steps = [b / a for a, b in zip(rates, rates[1:])]
    assert max(steps) == pytest.approx(min(steps)) == pytest.approx(100 ** (1 / 20))
    assert rates[0] == pytest.approx(1 / 2000 * 100 ** (0.5 / 20)) and rates[-1] < 1 / 20
    slow = model(time_scale=8.0)
    assert all(slow.rate(*k) == pytest.approx(model().rate(*k) / 8) for k in slow.keys())


def test_two_classes_of_rates_with_a_fast_share(tmp_path):
    web = model(fast_share=0.3)
    rates = list(web.rates().values())
    assert sorted(set(rates)) == [1 / 2000, 1 / 20] and rates.count(1 / 20) == 6  # round(0.3 x 20)
    assert rates != sorted(rates, reverse=True)  # shuffled by the seed, not the first pages fast
    web.write(tmp_path / "live.json")
    assert LiveWeb.load(tmp_path / "live.json").rates() == web.rates()
    assert model().rates() == model(fast_share=0.0).rates()  # the default spread is untouched


def test_only_two_classes_let_the_three_staleness_targets_be_checked_together():
    """Issue 15 asks adaptive <= 1.05 x the oracle, <= 0.85 x uniform and < 50 % wasted re-fetches at once.
    Since no policy beats the oracle in expectation, that needs a web and budget where the oracle itself is
    <= 0.85 / 1.05 of uniform AND wastes < 50 %: never on the 100x log-uniform spread (at any budget), and
    with a margin on the schedule bench's two-class web (30 % fast, B = N / 400 s, time scale 6)."""
    def regime(rates, budget):
        iv = S.oracle_intervals(rates, budget)
        return S.expected_staleness(rates, iv) / S.uniform_staleness(rates, budget), S.expected_wasted(rates, iv)

    spread = list(model(hosts=4, pages=24).rates().values())
    for budget in [sum(spread) * k / 10 for k in range(1, 41)]:
        gain, waste = regime(spread, budget)
        assert gain > 0.85 / 1.05 or waste >= 0.5
    two = [r / 6 for r in model(hosts=4, pages=24, fast_share=0.3).rates().values()]
    gain, waste = regime(two, 96 / 400)
    assert gain < 0.76 and waste < 0.45


def test_versions_follow_the_change_instants_deterministically():
    a, b = model(), model()
    key = max(a.keys(), key=lambda k: a.rate(*k))
    horizon = EPOCH + 3000
    ch = a.changes(*key, until=horizon)
    assert ch == b.changes(*key, until=horizon)  # the seed and the epoch decide them, in any process
    assert ch == sorted(set(ch)) and all(isinstance(c, int) and EPOCH < c <= horizon for c in ch)
    assert a.version(*key, at=EPOCH) == 0 and a.last_modified(*key, at=EPOCH) == math.floor(EPOCH - a.age(*key))
    for v, c in enumerate(ch[:10], start=1):
        assert a.version(*key, at=c - 0.001) == v - 1 and a.version(*key, at=c) == v
        assert a.last_modified(*key, at=c + 0.5) == c
    assert model(epoch=EPOCH + 1).changes(*key, until=horizon) != ch
    # Over a long horizon every page changes at its rate (Poisson counts: within 4 sigma of the sum).
    long = EPOCH + 200_000
    n = sum(len(a.changes(*k, until=long)) for k in a.keys())
    mean = sum(a.rate(*k) for k in a.keys()) * 200_000
    assert abs(n - mean) < 4 * math.sqrt(mean)
    # Version 0 was last changed before the epoch as on a stationary web: ages exponential at each rate,
    # so rate x age has mean 1 (20 pages: within 4 sigma), the same in every process.
    scaled = [a.rate(*k) * a.age(*k) for k in a.keys()]
    assert all(x > 0 for x in scaled) and [b.age(*k) for k in a.keys()] == [a.age(*k) for k in a.keys()]
    assert abs(sum(scaled) / len(scaled) - 1) < 4 / math.sqrt(len(scaled))


def test_each_version_has_a_new_main_text():
    from crawl_udfs import simhash

    m = model()
    key = m.keys()[0]
    texts = [m.page(*key, version=v).text for v in range(4)]
    assert len(set(texts)) == 4 and m.body(*key, version=1) == m.body(*key, version=1)
    sims = [simhash.simhash(t, 3) for t in texts]
    assert min(bin(x ^ y).count("1") for i, x in enumerate(sims) for y in sims[i + 1:]) > 10


@pytest.mark.parametrize("inm, ims, expected", [
    (None, None, False),
    (None, 99.0, False),          # modified after the date sent
    (None, 100.0, True),          # not modified since
    (None, 160.0, True),
    ('"e1"', None, True),
    ('W/"e1"', None, True),
    ('"x", "e1"', None, True),
    ("*", None, True),
    ('"e0"', 160.0, False),       # If-None-Match decides alone, even when the date would say 304
])
def test_not_modified(inm, ims, expected):
    assert not_modified('"e1"', 100, inm, ims) is expected


class Fixed:
    """A hand-made truth: the judge only asks keys() and changes()."""

    def __init__(self, changes: dict):
        self._c = changes

    def keys(self):
        return list(self._c)

    def changes(self, host, path, until):
        return [c for c in self._c[(host, path)] if c <= until]


def test_judge_on_a_hand_made_log():
    truth = Fixed({("live-0.test", "/live/0"): [10, 20], ("live-0.test", "/live/1"): []})
    rec = dict(kind="live", host="live-0.test", status=200, ua="deltacrawl/1", aborted=False)
    log = [{**rec, "path": "/live/0", "start": 0.0}, {**rec, "path": "/live/0", "start": 15.0, "status": 304},
           {**rec, "path": "/live/0", "start": 30.0}, {**rec, "path": "/live/0", "start": 35.0},
           {**rec, "path": "/live/1?x=1", "start": 5.0},
           {**rec, "path": "/live/1", "start": 1.0, "status": 404}, {**rec, "path": "/live/1", "start": 2.0, "aborted": True},
           {**rec, "path": "/live/0", "start": 12.0, "ua": "other"}, {**rec, "path": "/", "start": 3.0, "kind": "site"}]
    fetches = S.live_fetches(log, truth, ua="deltacrawl")
    assert fetches == {("live-0.test", "/live/0"): [0.0, 15.0, 30.0, 35.0], ("live-0.test", "/live/1"): [5.0]}
    j = S.judge(truth, fetches, 0.0, 40.0)
    # /live/0: stale 10..15 and 20..30; /live/1: not held 0..5, then never changes.
    assert j.stale_share == pytest.approx((5 + 10 + 5) / 80)
    assert (j.fetches, j.refetches, j.wasted) == (4, 3, 1)  # the fetch at 35 found no change
    assert S.judge(truth, fetches, 12.0, 40.0).stale_share == pytest.approx((3 + 10) / 56)


def test_the_references_uniform_and_oracle():
    assert S.oracle_staleness([0.01] * 5, 0.05) == pytest.approx(S.uniform_staleness([0.01] * 5, 0.05), abs=1e-6)
    rates = [1 / 20 * 100 ** (-(k + 0.5) / 50) for k in range(50)]
    ivs = S.oracle_intervals(rates, 50 / 200)
    assert sum(1 / i for i in ivs if i < S.NEVER_S) == pytest.approx(50 / 200, rel=1e-4)  # spends the budget
    assert S.oracle_staleness(rates, 0.25) < S.uniform_staleness(rates, 0.25)
    assert S.uniform_staleness(rates, 0.25) == pytest.approx(1 - sum(R.freshness(r, 200) for r in rates) / 50)
    assert S.expected_wasted([0.01, 0.02], [100.0, 50.0]) == pytest.approx((math.exp(-1) / 100 + math.exp(-1) / 50) / 0.03)
    # Periodic at a random phase on given changes, every 4 s, window 0..20: a change at 10 leaves the copy
    # stale with probability 1 - (t - 10)/4 until 14: I/2 = 2 s; changes at 10 and 12: 1.5 s, then 2 s.
    assert S.realised_periodic([10.0], 4.0, 0.0, 20.0) == pytest.approx(2.0)
    assert S.realised_periodic([10.0, 12.0], 4.0, 0.0, 20.0) == pytest.approx(1.5 + 2.0)
    assert S.realised_periodic([10.0], 4.0, 12.0, 20.0) == pytest.approx(0.5)
    assert S.realised_periodic([10.0], S.NEVER_S, 0.0, 20.0) == 10.0
    # and it is the expectation F gives: a page of rate λ on a long draw of its changes
    live = model()
    key = live.keys()[0]
    t1 = EPOCH + 400_000
    got = S.realised_periodic(live.changes(*key, until=t1), 300.0, EPOCH, t1) / (t1 - EPOCH)
    assert got == pytest.approx(1 - R.freshness(live.rate(*key), 300.0), rel=0.1)


def test_live_hosts_are_opt_in():
    assert not build_plan(60, 7).by_kind("live")
    plan = build_plan(0, 7, kinds=(), knobs=Knobs(live_hosts=2, live_pages=3))
    assert [h.name for h in plan.hosts.values()] == ["live-0.test", "live-1.test"]
    assert plan.host("live-1.test").reachable() == [f"http://live-1.test:0{p}" for p in ("/", "/live/0", "/live/1", "/live/2")]


def test_the_server_serves_versions_with_validators(tmp_path):
    knobs = {"live_hosts": 1, "live_pages": 2, "live_rate_min": 1e-9, "live_rate_max": 5000.0}
    with TestWeb(tmp_path, n_hosts=0, kinds=[], knobs=knobs) as web:
        live, host = web.live, "live-0.test"
        assert live.epoch == pytest.approx(time.time(), abs=30) and live.keys() == [(host, "/live/0"), (host, "/live/1")]
        fast, slow = sorted(live.keys(), key=lambda k: -live.rate(*k))  # ~3 changes a second; ~never
        assert live.rate(*fast) > 1 > 1e-5 > live.rate(*slow)

        def get(path: str, **headers) -> tuple[int, dict, bytes]:
            c = http.client.HTTPConnection(web.plan.host(host).address, web.port, timeout=10)
            c.request("GET", path, headers={"Host": f"{host}:{web.port}", **headers})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()

        status, h, body = get(slow[1])
        assert status == 200 and body == live.body(*slow, version=0)
        assert get(slow[1], **{"If-None-Match": h["ETag"]})[0] == 304
        assert get(slow[1], **{"If-Modified-Since": h["Last-Modified"]})[0] == 304
        assert get(slow[1], **{"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"})[0] == 200
        second = live.changes(*fast, until=live.epoch + 60)[1]
        time.sleep(max(0.0, second + 0.05 - time.time()))
        status, h, body = get(fast[1], **{"If-Modified-Since": formatdate(second - 1, usegmt=True)})
        v = live.version(*fast, at=time.time())
        assert status == 200 and body in (live.body(*fast, version=v - 1), live.body(*fast, version=v))
        log = web.log_of(lambda r: r["path"] in (slow[1], fast[1]), n=5)
        assert [r["status"] for r in log] == [200, 304, 304, 200, 200]
        assert all(r["live_version"] == live.version(host, r["path"], at=r["start"]) for r in log)
        assert log[-1]["live_version"] >= 2


def test_bootstrap_ranges_the_ratio_by_drawing_the_pages_again():
    """``staleness.bootstrap`` (schedule_bench's 90 % ranges): the pooled ratio, a range around it that
    is empty when every page says the same and wide when pages disagree; the same draws for the same seed."""
    same = [(0.2, 0.1)] * 50
    assert S.bootstrap(same) == pytest.approx((2.0, 2.0, 2.0))
    mixed = [(0.3, 0.1)] * 25 + [(0.1, 0.1)] * 25
    ratio, low, high = S.bootstrap(mixed)
    assert ratio == pytest.approx(2.0) and 1.6 < low < ratio < high < 2.4
    assert S.bootstrap(mixed) == (ratio, low, high)
    few = S.bootstrap(mixed[:5] + mixed[-5:])  # fewer pages: a wider range
    assert few[2] - few[1] > high - low
