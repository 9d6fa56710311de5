"""The console's HTML, rendered on the server: no script, every value escaped.

Every value that came from AWS or from the request (partition keys, record data, group
names, error messages) goes through ``e`` (``html.escape``, quotes included) before it is
written into the page, in text and in attributes alike; URLs are built with ``urlencode``
and then escaped. Cells carry ``data-field`` (and rows ``data-partition``) so tests and
scripts read the numbers without scraping layout. Charts are inline SVG.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from shardlog import constants as C
from shardlog.console.groups import GroupView
from shardlog.console.lake import LakeView
from shardlog.console.messages import Browse, SearchResult
from shardlog.console.queries import Overview, Series, iso_ms
from shardlog.format import LogRecord

DECODINGS = ("auto", "json", "utf8", "hex")
_STYLE = """
body{font:14px system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header b{margin-right:12px}
main{padding:14px 18px}.where{color:#9aa6b8;font-size:12px;margin-left:auto}
table{border-collapse:collapse;background:#fff;margin:8px 0 16px}
th,td{border:1px solid #d9dde4;padding:4px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#eef1f5}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:70ch}
.notice{background:#fff4d6;border:1px solid #e6c66a;padding:8px 12px;margin:8px 0}
.error{background:#fde8e8;border:1px solid #e59a9a;padding:8px 12px;margin:8px 0}
.ok{color:#1f7a3a}.bad{color:#b42318}form{margin:8px 0}input,select,button{font:inherit}
code{background:#eef1f5;padding:1px 4px}
"""


def e(value: object) -> str:
    """Escaped text for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def url(path: str, **params: object) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return e(f"{path}?{query}" if query else path)


def page(title: str, body: str, where: str, *, allow_actions: bool = False) -> str:
    nav = "".join(
        f'<a href="{href}">{label}</a>'
        for href, label in (
            ("/", "Overview"),
            ("/messages", "Messages"),
            ("/groups", "Consumer groups"),
            ("/lake", "Lake"),
        )
    )
    mode = "actions allowed" if allow_actions else "read-only"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{e(title)} · shardlog console</title><style>{_STYLE}</style></head><body>"
        f"<header><b>shardlog</b>{nav}<span class=where>{e(where)} · {mode}</span></header>"
        f"<main><h1>{e(title)}</h1>{body}</main></body></html>"
    )


def table(headers: Sequence[str], rows: Iterable[str], table_id: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    ident = f' id="{e(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def cell(field: str, value: object, *, number: bool = False, raw: str | None = None) -> str:
    klass = ' class="n"' if number else ""
    shown = raw if raw is not None else e("-" if value is None else value)
    return f'<td data-field="{e(field)}"{klass}>{shown}</td>'


def notice(text: str, kind: str = "notice") -> str:
    return f'<div class="{kind}" role="status">{e(text)}</div>'


# --- overview -----------------------------------------------------------------------------
def overview_page(view: Overview, where: str) -> str:
    rows = []
    for row in view.rows:
        pid = row["partitionId"]
        rows.append(
            f'<tr data-partition="{e(pid)}">'
            + cell(
                "partitionId", pid, raw=f'<a href="{url("/messages", partition=pid)}">{e(pid)}</a>'
            )
            + cell("state", row["state"])
            + cell("nextSeq", row["nextSeq"], number=True)
            + cell("ingestCheckpoint", row["ingestCheckpoint"])
            + cell("leaseOwner", row["leaseOwner"])
            + cell("lagRecords", row["lagRecords"] if view.with_lag else "not read", number=True)
            + cell("parents", ", ".join(row["parents"]))
            + "</tr>"
        )
    lag_link = (
        ""
        if view.with_lag
        else f'<p><a id="read-lag" href="{url("/", lag=1)}">Read the ingest lag</a> '
        "(reads each open shard: up to 11 Kinesis requests a partition, and Kinesis allows "
        "5 reads a second a shard, shared with ingest)</p>"
    )
    alarms = (
        table(
            ["alarm", "since", "reason"],
            (
                f"<tr>{cell('alarm', a['name'])}{cell('since', a['since'])}"
                f"{cell('reason', a['reason'])}</tr>"
                for a in view.alarms
            ),
            "alarms",
        )
        if view.alarms
        else '<p id="alarms-none" class="ok">No alarm in ALARM.</p>'
    )
    body = (
        "<h2>Partitions</h2>"
        + table(
            [
                "partition",
                "state",
                "head (next seq)",
                "ingest checkpoint",
                "ingest lease owner",
                "ingest lag (records)",
                "parents",
            ],
            rows,
            "partitions",
        )
        + lag_link
        + "<h2>Lineage</h2>"
        + lineage_svg(view.rows)
        + "<h2>Throughput, last hour</h2>"
        + charts(view.throughput)
        + "<h2>Alarms in alarm</h2>"
        + alarms
    )
    return page("Overview", body, where)


def lineage_svg(rows: Sequence[dict[str, Any]]) -> str:
    """Partitions as boxes in columns by generation (a child right of its parents), an
    arrow from each parent to each child: splits fan out, merges fan in."""
    if not rows:
        return "<p>No partition yet.</p>"
    depth: dict[str, int] = {}
    by_id = {row["partitionId"]: row for row in rows}

    def generation(pid: str, seen: frozenset[str] = frozenset()) -> int:
        if pid not in depth:
            parents = [p for p in by_id[pid]["parents"] if p in by_id and p not in seen]
            depth[pid] = 1 + max((generation(p, seen | {pid}) for p in parents), default=-1)
        return depth[pid]

    columns: dict[int, list[str]] = {}
    for pid in sorted(by_id):
        columns.setdefault(generation(pid), []).append(pid)
    box_w, box_h, gap_x, gap_y = 190, 34, 70, 16
    place = {
        pid: (10 + col * (box_w + gap_x), 10 + i * (box_h + gap_y))
        for col, pids in columns.items()
        for i, pid in enumerate(pids)
    }
    width = 20 + len(columns) * (box_w + gap_x)
    height = 20 + max(len(p) for p in columns.values()) * (box_h + gap_y)
    parts = [
        f'<svg id="lineage" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" role="img" aria-label="partition lineage">',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#7a8699"/></marker></defs>',
    ]
    for pid, row in by_id.items():
        x, y = place[pid]
        for parent in row["parents"]:
            if parent in place:
                px, py = place[parent]
                parts.append(
                    f'<line x1="{px + box_w}" y1="{py + box_h // 2}" x2="{x}" '
                    f'y2="{y + box_h // 2}" stroke="#7a8699" marker-end="url(#arrow)"/>'
                )
    colours = {C.STATE_OPEN: "#d8f0df", C.STATE_ENDED: "#e4e7ec"}
    for pid, (x, y) in place.items():
        row = by_id[pid]
        fill = colours.get(row["state"], "#fff1cc")
        parts.append(
            f'<a href="{url("/messages", partition=pid)}"><g data-partition="{e(pid)}">'
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="4" fill="{fill}" '
            f'stroke="#7a8699"/><text x="{x + 6}" y="{y + 14}" font-size="11">{e(pid)}</text>'
            f'<text x="{x + 6}" y="{y + 28}" font-size="11">{e(row["state"])} · head '
            f"{e(row['nextSeq'])}</text></g></a>"
        )
    parts.append("</svg>")
    return "".join(parts)


def charts(series: Sequence[Series]) -> str:
    out = []
    for one in series:
        out.append(f"<h3>{e(one.label)}</h3>{sparkline(one)}")
    return "".join(out) or "<p>No metric.</p>"


def sparkline(series: Series, width: int = 480, height: int = 60) -> str:
    if not series.points:
        return (
            '<p class="no-data">No data points in the last hour (CloudWatch has none: the '
            "metric is published by the deployed functions).</p>"
        )
    values = [v for _, v in series.points]
    low_t = series.points[0][0].timestamp()
    span_t = max(1.0, series.points[-1][0].timestamp() - low_t)
    top = max(values) or 1.0
    coords = " ".join(
        f"{(t.timestamp() - low_t) / span_t * (width - 10) + 5:.1f},"
        f"{height - 5 - v / top * (height - 10):.1f}"
        for t, v in series.points
    )
    return (
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="{e(series.label)}"><rect width="{width}" height="{height}" fill="#fff" '
        f'stroke="#d9dde4"/><polyline fill="none" stroke="#2f6fdb" stroke-width="1.5" '
        f'points="{coords}"/></svg><span data-field="latest">latest {e(values[-1])}, max '
        f"{e(top)}</span>"
    )


# --- message browser ----------------------------------------------------------------------
def decode(data: bytes, mode: str) -> tuple[str, str]:
    """(the decoding used, the text) for ``mode`` (auto: JSON, else UTF-8, else hex)."""
    if mode in ("auto", "json"):
        try:
            return "json", json.dumps(json.loads(data.decode("utf-8")), indent=2, sort_keys=True)
        except ValueError:
            if mode == "json":
                return "hex", data.hex(" ") + "  (not JSON)"
    if mode in ("auto", "utf8"):
        try:
            return "utf8", data.decode("utf-8")
        except UnicodeDecodeError:
            if mode == "utf8":
                return "hex", data.hex(" ") + "  (not UTF-8)"
    return "hex", data.hex(" ")


def browse_form(
    partitions: Sequence[str], partition: str = "", decoding: str = "auto", key: str = ""
) -> str:
    options = "".join(
        f'<option value="{e(p)}"{" selected" if p == partition else ""}>{e(p)}</option>'
        for p in partitions
    )
    decodings = "".join(
        f'<option value="{d}"{" selected" if d == decoding else ""}>{d}</option>' for d in DECODINGS
    )
    return (
        '<form id="browse" method="get" action="/messages">'
        f'<label>partition <select name="partition">{options}</select></label> '
        '<label>from seq <input name="seq" size="8"></label> '
        '<label>or from time <input name="time" size="26" placeholder="2026-11-25T03:00:00Z">'
        f'</label> <label>decode <select name="decode">{decodings}</select></label> '
        '<button type="submit">Show</button></form>'
        '<form id="search" method="get" action="/search">'
        f'<label>partition key <input name="key" size="30" value="{e(key)}"></label> '
        '<button type="submit">Search all partitions</button></form>'
    )


def record_rows(records: Sequence[LogRecord], decoding: str) -> list[str]:
    rows = []
    for record in records:
        used, text = decode(record.data, decoding)
        link = url("/record", partition=record.partition_id, seq=record.seq, decode=decoding)
        rows.append(
            f'<tr data-partition="{e(record.partition_id)}" data-seq="{record.seq}">'
            + cell("partitionId", record.partition_id)
            + cell("seq", record.seq, number=True, raw=f'<a href="{link}">{record.seq}</a>')
            + cell("partitionKey", record.partition_key)
            + cell("arrivalTime", iso_ms(record.arrival_ms))
            + cell("decoding", used)
            + cell("data", None, raw=f"<pre>{e(text)}</pre>")
            + "</tr>"
        )
    return rows


_RECORD_HEADERS = ["partition", "seq", "partition key", "arrival", "as", "data"]


def browse_page(
    view: Browse, partitions: Sequence[str], decoding: str, limit: int, where: str
) -> str:
    pid = view.partition.partition_id
    head = view.partition.next_seq
    found = (
        f"<p>First record that arrived at or after {e(view.found_by_time.isoformat())}: seq "
        f"{view.from_seq}.</p>"
        if view.found_by_time
        else ""
    )
    shown = (
        f'<p id="range">Partition <b>{e(pid)}</b> ({e(view.partition.state)}), head '
        f'<span data-field="head">{head}</span>: seq {view.from_seq} to '
        f"{view.from_seq + len(view.records) - 1 if view.records else view.from_seq}.</p>"
    )
    pager = []
    if view.from_seq > 0:
        back = max(0, view.from_seq - limit)
        pager.append(
            f'<a href="{url("/messages", partition=pid, seq=back, decode=decoding)}">previous</a>'
        )
    if view.from_seq + len(view.records) < head:
        ahead = view.from_seq + len(view.records)
        onward = url("/messages", partition=pid, seq=ahead, decode=decoding)
        pager.append(f'<a id="next" href="{onward}">next</a>')
    body = (
        browse_form(partitions, pid, decoding)
        + found
        + shown
        + table(_RECORD_HEADERS, record_rows(view.records, decoding), "records")
        + " · ".join(pager)
    )
    if not view.records:
        body += notice("No committed record in this range yet.")
    return page(f"Messages: {pid}", body, where)


def record_page(record: LogRecord, decoding: str, where: str) -> str:
    replay = (
        f"shardlog read --partition {record.partition_id} --from-seq {record.seq} "
        f"--to-seq {record.seq + 1}"
    )
    views = "".join(
        f'<h3>{label}</h3><pre data-field="{name}">{e(decode(record.data, name)[1])}</pre>'
        for name, label in (("json", "JSON"), ("utf8", "UTF-8"), ("hex", "hex"))
    )
    body = (
        table(_RECORD_HEADERS, record_rows([record], decoding), "records")
        + f"<p>Kinesis sequence number <code>{e(record.kinesis_sequence_number)}</code>; "
        f"record id <code>{e(record.record_id or '-')}</code></p>"
        + f'<p>The same from the CLI: <code data-field="replay">{e(replay)}</code></p>'
        + views
        + f"<p>data (base64): <code>{e(base64.b64encode(record.data).decode())}</code></p>"
    )
    return page(f"Record {record.partition_id} #{record.seq}", body, where)


def search_page(result: SearchResult, partitions: Sequence[str], budget: int, where: str) -> str:
    progress = (
        f'<p id="progress">Searched <span data-field="searched">{result.searched_records}</span> '
        f"records in this request; {result.partitions_done} of {result.partitions} partitions "
        f"done ({result.total_records} committed records in all).</p>"
    )
    onward = url("/search", key=result.key, cursor=result.next_cursor, budget=budget)
    more = (
        f'<p><a id="continue" href="{onward}">'
        f"Continue the search</a> (reads up to {budget} more records)</p>"
        if result.next_cursor
        else '<p id="done">Every partition searched.</p>'
    )
    found = (
        table(_RECORD_HEADERS, record_rows(result.found, "auto"), "records")
        if result.found
        else "<p>No record with this key in the records searched.</p>"
    )
    body = browse_form(partitions, key=result.key) + progress + found + more
    return page(f"Key {result.key!r}", body, where)


# --- consumer groups ----------------------------------------------------------------------
def groups_page(names: Sequence[str], where: str) -> str:
    items = "".join(f'<li><a href="{url("/group", name=n)}">{e(n)}</a></li>' for n in names)
    body = f'<ul id="groups">{items}</ul>' if names else "<p>No consumer group yet.</p>"
    return page("Consumer groups", body, where)


def group_page(view: GroupView, where: str) -> str:
    rows = []
    for row in view.rows:
        pid = row["partitionId"]
        owner = row["leaseOwner"] or "-"
        if row["leaseOwner"] and not row["leaseLive"]:
            owner += " (expired)"
        retry = view.retries.get(pid)
        rows.append(
            f'<tr data-partition="{e(pid)}">'
            + cell("partitionId", pid)
            + cell("state", row["state"])
            + cell("nextSeq", row["nextSeq"], number=True)
            + cell("leaseOwner", owner)
            + cell("checkpoint", row["checkpoint"])
            + cell("lagRecords", row["lagRecords"], number=True)
            + cell("lagMs", row["lagMs"], number=True)
            + cell("waitingOnParents", "yes" if row["waitingOnParents"] else "")
            + cell("retry", ", ".join(f"{k} {v}" for k, v in retry.items()) if retry else "")
            + "</tr>"
        )
    kind = "a Lambda consumer group" if view.kind == "lambda" else "a worker group"
    body = (
        f'<p>{e(view.name)}: <span data-field="groupKind">{e(kind)}</span>.</p>'
        + table(
            [
                "partition",
                "state",
                "head",
                "owner",
                "checkpoint",
                "lag (records)",
                "lag (ms)",
                "waiting on parents",
                "retry state",
            ],
            rows,
            "progress",
        )
        + "<h2>Lag, last hour</h2>"
        + charts(view.trend)
        + _on_failure(view)
        + _last_seek(view)
    )
    return page(f"Consumer group {view.name}", body, where)


def _last_seek(view: GroupView) -> str:
    """The group's last seek, and how to seek it (the console only reads)."""
    last = view.rows[0].get("lastSeek") if view.rows else None
    done = (
        f'<p id="last-seek">Last seek: to <span data-field="lastSeekPosition">'
        f"{e(last['position'])}</span> at {e(iso_ms(last['at']))} by {e(last['by'])}.</p>"
        if last
        else ""
    )
    return done + (
        "<p>To seek the group (every partition's checkpoint, fenced against its running "
        f"consumers): <code>shardlog group seek --group {e(view.name)} --dry-run ...</code> "
        "(the console only reads).</p>"
    )


def _on_failure(view: GroupView) -> str:
    if view.kind != "lambda":
        return ""
    if view.on_failure_where is None or view.on_failure_waiting is None:
        return "<h2>On-failure batches</h2>" + notice(view.on_failure_note or "unknown")
    rows = (
        f'<tr data-partition="{e(b.partition_id)}">'
        + cell("partitionId", b.partition_id)
        + cell("seqs", f"{b.first_seq}..{b.last_seq}")
        + cell("condition", b.condition)
        + cell("attempts", b.attempts, number=True)
        + cell("sentAt", b.sent_at)
        + cell("replay", None, raw=f"<code>{e(b.replay)}</code>")
        + "</tr>"
        for b in view.on_failure
    )
    shown = (
        table(
            ["partition", "seqs", "condition", "attempts", "sent", "replay with"],
            rows,
            "on-failure",
        )
        if view.on_failure
        else ""
    )
    return (
        "<h2>On-failure batches</h2>"
        f'<p><span data-field="onFailureWaiting">{view.on_failure_waiting}</span> in '
        f"<code>{e(view.on_failure_where)}</code> (up to 10 shown; left in the queue).</p>" + shown
    )


# --- lake ---------------------------------------------------------------------------------
def lake_page(view: LakeView, where: str) -> str:
    snapshots = table(
        [
            "snapshot",
            "current",
            "committed",
            "operation",
            "run id",
            "added records",
            "total records",
        ],
        (
            f"<tr>{cell('id', s['id'])}{cell('current', 'yes' if s['current'] else '')}"
            f"{cell('at', s['at'])}{cell('operation', s['operation'])}{cell('runId', s['runId'])}"
            f"{cell('addedRecords', s['addedRecords'], number=True)}"
            f"{cell('totalRecords', s['totalRecords'], number=True)}</tr>"
            for s in view.snapshots
        ),
        "snapshots",
    )
    freshness = table(
        ["partition", "state", "head", "watermark", "records not in the table"],
        (
            f'<tr data-partition="{e(f["partitionId"])}">{cell("partitionId", f["partitionId"])}'
            f"{cell('state', f['state'])}{cell('head', f['head'], number=True)}"
            f"{cell('watermark', f['watermark'], number=True)}"
            f"{cell('behind', f['behind'], number=True)}</tr>"
            for f in view.freshness
        ),
        "freshness",
    )
    runs = table(
        ["job", "last run", "state", "started", "updated"],
        (
            f'<tr data-job="{e(job)}">{cell("job", job)}'
            + (
                f"{cell('id', run['id'])}{cell('state', run['state'])}"
                f"{cell('createdAt', _when(run['createdAt']))}"
                f"{cell('updatedAt', _when(run['updatedAt']))}"
                if run
                else cell("id", "none")
                + cell("state", "")
                + cell("createdAt", "")
                + cell("updatedAt", "")
            )
            + "</tr>"
            for job, run in view.runs.items()
        ),
        "runs",
    )
    missing = notice(view.missing) if view.missing else ""
    body = (
        f'<p>Table <code data-field="table">{e(view.table)}</code></p>'
        + missing
        + "<h2>Freshness: watermark against head</h2>"
        + freshness
        + "<h2>Snapshots (newest first)</h2>"
        + (snapshots if view.snapshots else "<p>No snapshot.</p>")
        + "<h2>Spark runs: compaction, analytics, maintenance</h2>"
        + f"<p>{e(view.runs_note)}</p>"
        + runs
    )
    return page("Lake", body, where)


def _when(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value or "")


# --- errors and actions -------------------------------------------------------------------
def error_page(status: int, message: str, where: str) -> str:
    return page(
        "Not found" if status == 404 else "Cannot show this",
        f'<div class="error" role="alert" data-status="{status}">{e(message)}</div>'
        '<p><a href="/">Back to the overview</a></p>',
        where,
    )


def confirm_page(action: str, what: str, token: str, where: str) -> str:
    return page(
        f"Confirm: {what}",
        f"<p>This changes the deployment: {e(what)}.</p>"
        f'<form id="confirm" method="post" action="/actions/{e(action)}">'
        f'<input type="hidden" name="token" value="{e(token)}">'
        '<button type="submit">Yes, do it</button> <a href="/">Cancel</a></form>',
        where,
        allow_actions=True,
    )


def done_page(what: str, result: str, where: str) -> str:
    return page(what, f'<p class="ok" id="result">{e(result)}</p>', where, allow_actions=True)
