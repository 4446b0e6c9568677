"""A round's report: an HTML page (and its Markdown twin) with four plots, under ``reports/round=N/``.

``deltacrawl report [--round N]`` writes it from the tables (the round's ``fetch_output``
rows, kept for every round, and the rounds ledger) and prints the Markdown, so any round's
report can be made at any time, beside a running crawl (it only reads committed snapshots).
The plots, each readable at a glance:

- ``pages_per_s.png``: pages fetched per second over the round's fetch window (is every
  host busy the whole window, or does the rate fall off early?);
- ``outcomes.png``: pages by outcome;
- ``slowest_hosts.png``: the hosts whose pages took the longest, summed over their pages and
  split into the responses' time and the waits for the host's turn (who holds the round, and why);
- ``rounds.png``: frontier size and duplicates per round, over the whole crawl.

Files go through ``pyarrow.fs`` (a local disk or object storage, like WARC files).
"""

from __future__ import annotations

import html
import io

from crawl_udfs.config import Config, ConfigError
from jobs import common, ledger
from jobs.rounds import summary
from jobs.warc_staging import filesystem
from schemas import counters

#: Hosts shown in the slowest-hosts plot and table.
TOP_HOSTS = 10
PLOTS = {"pages_per_s.png": "Pages per second over the fetch window", "outcomes.png": "Pages by outcome",
         "slowest_hosts.png": f"The {TOP_HOSTS} hosts whose pages waited and took the longest",
         "rounds.png": "Frontier and duplicates per round"}


def report_dir(conf: Config, round_no: int) -> str:
    return f"{common.root(conf)}/reports/round={round_no}"


def run(spark, conf: Config, round_no: int | None = None) -> tuple[str, str]:
    """Write round ``round_no``'s report (default: the last round fetched); returns (its directory, Markdown)."""
    rows = ledger.current(spark, conf).rows
    fetched = sorted(n for n, r in rows.items() if r.get("fetched_at") is not None)
    if round_no is None:
        if not fetched:
            raise ConfigError("no round has been fetched yet: nothing to report")
        round_no = fetched[-1]
    if round_no not in fetched:
        raise ConfigError(f"round {round_no} has not been fetched (fetched rounds: {_span(fetched)})")
    cols = ["kind", "host", "outcome", "fetch_time", "politeness_wait_ms", "t_total_ms", "wire_bytes", "delay_s"]
    out = common.read(spark, conf, "fetch_output").where(f"round = {round_no}").select(*cols).toPandas()
    pages, hosts = out[out.kind == "page"], out[out.kind == "host"]
    history = [rows[n] for n in sorted(rows)]
    slow = _slowest(pages, hosts)
    figures = _figures(pages, slow, history, round_no)
    block = summary(rows[round_no])  # the round's block, as crawl prints it
    md = _markdown(round_no, block, slow)
    directory = report_dir(conf, round_no)
    fs, base = filesystem(directory, conf)
    fs.create_dir(base, recursive=True)
    for name, png in figures.items():
        _put(fs, f"{base}/{name}", png)
    _put(fs, f"{base}/report.md", md.encode())
    _put(fs, f"{base}/index.html", _html(round_no, block, slow).encode())
    return directory, md


def _span(ns: list[int]) -> str:
    return f"{ns[0]}..{ns[-1]}" if ns else "none"


def _put(fs, path: str, data: bytes) -> None:
    with fs.open_output_stream(path) as f:
        f.write(data)


def _slowest(pages, hosts):
    """Per host: pages, seconds of responses, seconds waited for politeness, its delay; the top hosts."""
    g = pages.groupby("host").agg(pages=("outcome", "size"), response_s=("t_total_ms", "sum"),
                                  wait_s=("politeness_wait_ms", "sum"))
    g[["response_s", "wait_s"]] = g[["response_s", "wait_s"]].fillna(0) / 1000.0
    g = g.join(hosts.set_index("host")[["delay_s"]], how="left")
    g["total_s"] = g.response_s + g.wait_s
    return g.sort_values("total_s", ascending=False).head(TOP_HOSTS)


def _figures(pages, slowest, history: list[dict], round_no: int) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    def png(fig) -> bytes:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        return buf.getvalue()

    out = {}
    fig, ax = plt.subplots(figsize=(8, 3.2))
    times = pages.fetch_time.dropna().sort_values()
    if len(times):
        t = (times - times.iloc[0]).dt.total_seconds()
        width = max(1.0, float(t.iloc[-1]) / 60)
        counts = (t // width).value_counts().sort_index()
        ax.bar(counts.index * width, counts.values / width, width=width, align="edge", color="#3b75af")
    ax.set(xlabel="seconds since the round's first fetch", ylabel="pages/s", title=PLOTS["pages_per_s.png"])
    out["pages_per_s.png"] = png(fig)

    fig, ax = plt.subplots(figsize=(8, 3.2))
    by = pages.outcome.value_counts().sort_values()
    ax.barh(by.index, by.values, color="#3b75af")
    for y, v in enumerate(by.values):
        ax.annotate(f"{v:,}", (v, y), xytext=(3, 0), textcoords="offset points", va="center")
    ax.set(xlabel="pages", title=PLOTS["outcomes.png"])
    out["outcomes.png"] = png(fig)

    slow = slowest.iloc[::-1]  # the slowest at the top
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.barh(slow.index, slow.response_s, color="#3b75af", label="responses")
    ax.barh(slow.index, slow.wait_s, left=slow.response_s, color="#e8a33d", label="waits for the host's turn (politeness)")
    ax.set(xlabel="seconds (summed over the host's pages)", title=PLOTS["slowest_hosts.png"])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    out["slowest_hosts.png"] = png(fig)

    fig, ax = plt.subplots(figsize=(8, 3.2))
    ns = [r["round"] for r in history]
    for name, color in (("frontier_size", "#3b75af"), ("duplicates", "#c44e52")):
        ax.plot(ns, [counters.value(r.get("counts") or {}, name) for r in history], marker="o", color=color,
                label=name.replace("_", " "))
    ax.axvline(round_no, color="#999999", linestyle=":", label=f"round {round_no}")
    ax.set(xlabel="round", ylabel="URLs", title=PLOTS["rounds.png"])
    ax.set_xticks(ns)
    ax.legend()
    out["rounds.png"] = png(fig)
    return out


def _markdown(round_no: int, block: str, slow) -> str:
    lines = [f"# deltacrawl: round {round_no}", "", "```", block, "```", "",
             f"## {PLOTS['slowest_hosts.png']}", "",
             "| host | pages | responses (s) | waits for its turn (s) | delay (s) |", "|---|---|---|---|---|"]
    for host, r in slow.iterrows():
        lines.append(f"| {host} | {int(r.pages)} | {r.response_s:.1f} | {r.wait_s:.1f} | {_delay(r)} |")
    lines += [""] + [f"![{title}]({name})" for name, title in PLOTS.items()]
    return "\n".join(lines) + "\n"


def _delay(r) -> str:
    return "" if r.delay_s is None or r.delay_s != r.delay_s else f"{r.delay_s:.1f}"  # NaN: no host row


def _html(round_no: int, block: str, slow) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(h))}</td><td>{int(r.pages)}</td><td>{r.response_s:.1f}</td>"
        f"<td>{r.wait_s:.1f}</td><td>{_delay(r)}</td></tr>" for h, r in slow.iterrows())
    plots = "".join(f'<figure><img src="{n}" alt="{html.escape(t)}"></figure>' for n, t in PLOTS.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>deltacrawl round {round_no}</title>
<style>body{{font-family:sans-serif;max-width:860px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}
td:first-child{{text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>deltacrawl: round {round_no}</h1><pre>{html.escape(block)}</pre>
<h2>{html.escape(PLOTS['slowest_hosts.png'])}</h2>
<table><tr><th>host</th><th>pages</th><th>responses (s)</th><th>waits for its turn (s)</th><th>delay (s)</th></tr>
{rows}</table>{plots}</body></html>
"""
