"""The crawl-DB rows update writes: the merge source's rows made whole (a pure transform).

Update replaces the rows of the round's URLs (``jobs.update_commit.replace_crawldb``), so each row it
writes must be the whole row. :func:`whole_rows` makes it from a merge-source row
(``jobs.update_transforms.merge_source``) and the URL's row as read; ``jobs.duck_outputs.whole_rows`` is
its DuckDB twin. :data:`PARTIAL`, :data:`KEPT` and :data:`INSERTED` are the rules both twins, the counters
and the write read.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.update_transforms import MOVED, WAS
from schemas.tables import CRAWLDB
#: What update writes of a known URL's row, by the merge source's ``_kind``, where it is not the whole
#: row: a ``repoint`` row sets its status and ``dup_of`` (``jobs/originals.py``), a ``due`` row its
#: ``next_fetch_time`` (``jobs/sitemap_transforms.py``), a ``moved`` row its score and change history
#: (``jobs.update_transforms.moved_to_known``); every other column stays as read.
PARTIAL = {"repoint": ("status", "dup_of", "updated_round"),
           "due": ("next_fetch_time", "updated_round"),
           "moved": ("score", *MOVED, "updated_round")}
#: Columns another step owns: a known URL's row keeps the value read (``importance``: jobs/importance.py).
KEPT = ("importance",)
#: SQL condition on a merge-source row: a URL absent from the crawl DB as read, which update inserts (a
#: new URL, or one followed inside the round: an ``update`` row with no ``_was``).
INSERTED = f"(_kind IN ('update', 'new') AND {WAS} IS NULL)"


def whole_kinds(column: str) -> tuple[str, ...]:
    """The kinds (``_kind``) whose row takes ``column`` from the crawl DB's row (when the URL has one):
    ``new`` (a URL known after all is left as it is), the partial kinds that do not set it (:data:`PARTIAL`),
    and every kind for a :data:`KEPT` column."""
    kinds = ("new", *[k for k, cols in PARTIAL.items() if column not in cols])
    return (*kinds, "update", "budget") if column in KEPT else kinds


def whole_rows(source: DataFrame, crawldb: DataFrame) -> DataFrame:
    """:func:`merge_source`'s rows as whole crawl-DB rows, which update writes in place of the rows read
    (``jobs.update_commit.replace_crawldb``): each column by :func:`whole_kinds` from the URL's row in
    ``crawldb`` (the version read), else from the source. A ``repoint``, ``due`` or ``moved`` row of a URL
    ``crawldb`` lacks is dropped: it changes a row, it never adds one; a ``new`` row of a URL it has takes
    that row's status as ``_was`` (not :data:`INSERTED`: its row is written back as read). Same columns as
    ``source``."""
    base = crawldb.select("url_fp", *[F.col(f.name).alias(f"_b_{f.name}") for f in CRAWLDB.fields
                                      if f.name != "url_fp"], F.lit(True).alias("_known"))
    keys = F.broadcast(source.select("url_fp"))
    rows = source.join(base.join(keys, "url_fp", "left_semi"), "url_fp", "left")
    known = F.col("_known").isNotNull()

    def col(name: str) -> Column:
        if name == WAS:
            return F.when(known & (F.col("_kind") == "new"), F.col("_b_status")).otherwise(F.col(WAS))
        if name not in CRAWLDB.fieldNames() or name == "url_fp":
            return F.col(name)
        return F.when(known & F.col("_kind").isin(*whole_kinds(name)), F.col(f"_b_{name}")).otherwise(F.col(name))
    return (rows.where(known | ~F.col("_kind").isin(*PARTIAL))
            .select(*[col(c).alias(c) for c in source.columns]))
