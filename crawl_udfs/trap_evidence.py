"""How much a trap strike proves: an upper confidence bound on a host's new-content share.

Guarantees:
- :func:`new_share_bound` is the upper end of the Wilson score interval of a binomial share
  (E. B. Wilson, "Probable inference, the law of succession, and statistical inference",
  JASA 1927; recommended over the normal approximation by Brown, Cai and DasGupta, Statistical
  Science 2001, because it stays inside 0..1 and is sound for 0 successes and small n). Taken
  one-sided at confidence c (z = the standard normal quantile of c, :func:`z_score`): if the
  host's true share of pages bringing new content were above the bound, a sample as poor as
  the one seen would happen with probability under 1 - c.
- The bound shrinks with the evidence: with 0 new pages of n it is z² / (n + z²), so at
  c = 0.99 (z = 2.326) it is 52 % for 5 pages, 9.9 % for 49 and 1.8 % for 300. A trap rule
  comparing it with ``trap.max_new_share`` therefore parks on a round of hundreds of copies
  at once and never on a round of five (tests/test_trap_evidence.py has the table).
- One formula, written with arithmetic operators only and ``sqrt`` passed in, so the same
  expression runs on Python numbers (tests, reports) and on Spark Columns
  (:func:`jobs.hosts_transforms.judge_traps` passes ``pyspark.sql.functions.sqrt``).

Plain functions of plain values (STYLE rule 2): no Spark, no I/O.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable

__all__ = ["z_score", "new_share_bound", "proves_trap"]


def z_score(confidence: float) -> float:
    """The one-sided standard normal quantile of ``confidence`` (0.5 <= confidence < 1): 2.326 at 0.99."""
    if not 0.5 <= confidence < 1:
        raise ValueError(f"a one-sided confidence must be within 0.5..1 (1 excluded), got {confidence}")
    return NormalDist().inv_cdf(confidence)


def new_share_bound(new: Any, pages: Any, z: float, sqrt: Callable[[Any], Any] = math.sqrt) -> Any:
    """Wilson's upper bound on the share of new pages, ``new`` of ``pages`` (> 0) seen, at quantile ``z``.

    ``new`` and ``pages`` are numbers or Spark Columns (then ``sqrt`` is ``F.sqrt``)."""
    p = new / pages
    z2 = z * z
    centre = p + z2 / (2 * pages)
    spread = z * sqrt(p * (1 - p) / pages + z2 / (4 * pages * pages))
    return (centre + spread) / (1 + z2 / pages)


def proves_trap(new: Any, pages: Any, max_new_share: float, z: float, sqrt: Callable[[Any], Any] = math.sqrt) -> Any:
    """True when even the bound of :func:`new_share_bound` is under ``max_new_share``: evidence enough
    to park at once (``trap.max_new_share``, ``z`` of ``trap.park_confidence``)."""
    return new_share_bound(new, pages, z, sqrt) < max_new_share
