"""Regenerate docs/PERFORMANCE.md's measured figures from the benchmarks' own output.

Runs bench/speed.py (this machine's speed, printed beside the date), bench/ingest.py (always
its full run: its ratios are goals), bench/latency.py and bench/cost.py (quick modes unless
--full), bench/compact.py (200,000 records; 1,000,000 with --full), each writing JSON, keeps
what they measured in build/bench/report.json, and rewrites the block between
``<!-- measured:begin -->`` and ``<!-- measured:end -->`` in docs/PERFORMANCE.md: dated, with
the machine (cores, RAM, Python, load average when it started: other work on the machine
shows in the figures). Nothing else changes: not the rest of the page, not README.md.
``--from-results`` renders a kept report.json again without running anything. Exits non-zero
when a benchmark fails its own correctness check.
Usage: python bench/report.py [--full] [--root DIR] [--from-results JSON] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
BEGIN = "<!-- measured:begin -->"
END = "<!-- measured:end -->"
PAGE = Path("docs") / "PERFORMANCE.md"  # the only file this script writes


def run(script: str, *args: str) -> str:
    """Run a benchmark; its stdout. A failed correctness check stops the report."""
    command = [sys.executable, str(REPO / "bench" / script), *args]
    print("$ " + " ".join(command[1:]), file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{script} failed (exit {done.returncode}): nothing rewritten")
    return done.stdout


def machine() -> str:
    mem_kib = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{os.cpu_count()} cores, {mem_kib / 1024**2:.0f} GiB RAM, Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}; "
        f"load average {load} when the run started"
    )


def ingest_block(rows: list[dict[str, Any]]) -> list[str]:
    by = {r["path"]: r for r in rows}
    writer, handler = by["shardlog (segments)"], by["shardlog via Lambda handler"]
    baseline = rows[-1]
    lines = [
        "| ingest path (`bench/ingest.py`) | records/s | AWS requests per 1,000 records |",
        "| --- | ---: | ---: |",
    ]
    lines += [
        f"| {r['path']} | {r['recordsPerSecond']:,.0f} | {r['requestsPer1000Records']:,.2f} |"
        for r in rows
    ]
    handler_ratio = handler["recordsPerSecond"] / writer["recordsPerSecond"]
    lines += [
        "",
        f"Lambda handler / bare writer: **{handler_ratio:.2f}x** records/s; "
        "bare writer / Safya-style baseline: "
        f"**{writer['recordsPerSecond'] / baseline['recordsPerSecond']:,.0f}x** records/s, "
        f"**{baseline['requestsPer1000Records'] / writer['requestsPer1000Records']:,.0f}x** fewer "
        "requests. The three are timed interleaved, a batch of each in turn. Requests per "
        "batch: docs/ARCHITECTURE.md section 4 (here the first batch reads the state, the "
        "others skip the read).",
    ]
    by_operation = ", ".join(
        f"{op} {ms:,.2f}" for op, ms in writer["requestCpuMsPer1000RecordsByOperation"].items()
    )
    own = writer["cpuMsPer1000Records"] - writer["requestCpuMsPer1000Records"]
    bound = writer["requestCpuBoundVsBaseline"]
    lines += [
        "",
        "Where the time goes (CPU ms per 1,000 records, both ends: the embedded AWS runs in "
        f"the benchmark's process): the bare writer {writer['cpuMsPer1000Records']:,.2f}, of "
        f"which its requests {writer['requestCpuMsPer1000Records']:,.2f} ({by_operation}) "
        f"and its own code {own:,.2f}; the baseline's requests "
        f"{baseline['requestCpuMsPer1000Records']:,.0f}. Locally a request costs CPU, and a "
        "transaction or a conditional update with a long expression costs moto more than a "
        "plain increment, so the requests alone bound bare writer / baseline at "
        f"**{bound:,.0f}x** here, whatever the writer's own code.",
    ]
    return lines


def latency_block(runs: list[dict[str, Any]], command: str) -> list[str]:
    lines = [
        f"Latency (`{command}`): a steady-rate producer into the local runtime (embedded AWS, "
        "local poller, ingest handler: `shardlog local up`); ms from the PutRecords call. "
        "Committed = the ingest commit returned (the writer's commit time), from runs of the "
        "ingest alone at each batching window. Each consumer path comes from a run of its own "
        "at the default window, that consumer alone beside the ingest (on AWS each has compute "
        "of its own; here they all share two cores): a `shardlog consume` worker in its own "
        "process with the default busy poll (200 ms while a partition delivered within 10 s), "
        "the same worker polling every 1,000 ms (busy polling off, as KCL polls), and a Lambda "
        "consumer group woken through the partitions stream, in a process of its own like the "
        "worker. Each run is timed after a 3 s "
        "warm-up, at the steady rate (the warm-up's records are checked as well; their "
        "latency is in the benchmark's output).",
        "",
        "| rate/s | ingest window | path | p50 | p95 | p99 | max | ingest req/1k rec |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run_ in runs:
        for path, f in run_["paths"].items():
            lines.append(
                f"| {run_['rate']:,} | {run_['windowMs']} ms | {path} | {f['p50']:,.0f} | "
                f"{f['p95']:,.0f} | {f['p99']:,.0f} | {f['max']:,.0f} | "
                f"{run_['ingestRequestsPer1000Records']:.2f} |"
            )
    lagging = [r for r in runs if r["achievedRate"] < 0.95 * r["rate"]]
    for r in lagging:
        beside = f", {r['consumer']} beside the ingest" if r.get("consumer") else ""
        lines.append(
            f"\nAt {r['rate']:,}/s (window {r['windowMs']} ms{beside}) the producer reached only "
            f"{r['achievedRate']:,.0f}/s: this machine, not the design, is the bound there."
        )
    return lines


def compaction_block(report: dict[str, Any], command: str) -> list[str]:
    spark, baseline = report["paths"]
    fresh = report["freshQuery"]
    lines = [
        f"Compaction (`{command}`): the Spark job on `local[2]` appending the log to the "
        "Iceberg table, beside one Python process writing the same Parquet files with pyarrow "
        "(no table commit), over the same segments and S3.",
        "",
        "| path | records | seconds | records/s | files | MiB | seconds by step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in (spark, baseline):
        steps = ", ".join(f"{k} {v:.2f}" for k, v in r["phaseSeconds"].items())
        lines.append(
            f"| {r['path']} | {r['records']:,} | {r['seconds']:.2f} | "
            f"{r['recordsPerSecond']:,.0f} | {r['files']} | {r['bytes'] / 2**20:.1f} | {steps} |"
        )
    lines += [
        "",
        f"Spark / baseline: **{report['sparkVsBaseline']}x** records/s. The table commit "
        f"(one snapshot): {report['tableCommitSeconds']:.2f} s. Table freshness right after "
        f"the run: {report['tableFreshnessSecondsAfterRun']:.0f} s since the newest arrival "
        "(on AWS add up to the schedule's interval). `shardlog lake query "
        f"{fresh['query']}`: {fresh['plainSeconds']:.2f} s from the table alone, "
        f"{fresh['freshSeconds']:.2f} s with `--fresh` over {fresh['uncompactedRecords']:,} "
        f"uncompacted records ({fresh['freshOverPlain']}x).",
    ]
    return lines + rewrite_lines(report.get("rewrite"))


def rewrite_lines(rewrite: dict[str, Any] | None) -> list[str]:
    """Right-sized files: a day's files before and after maintenance's rewrite."""
    if not rewrite:
        return []
    days = "; ".join(
        f"{d['day']}: {d['filesBefore']} files ({d['mibBefore']} MiB) -> {d['filesAfter']} "
        f"({d['mibAfter']} MiB)"
        for d in rewrite["days"]
    )
    return [
        "",
        f"Right-sized files: after {rewrite['compactionRuns']} compaction runs of "
        f"{rewrite['records']:,} records, maintenance's rewrite at the default 256 MiB target: "
        f"{days}, in {rewrite['seconds']:.2f} s ({rewrite['recordsPerSecond']:,.0f} records/s).",
    ]


def cost_block(rows: list[dict[str, Any]], command: str, region: str, as_of: str) -> list[str]:
    lines = [
        f"Cost (`{command}`): $ per million records from the requests the workloads sent "
        f"(metered), at {region} list prices of {as_of} (`bench/pricing.py`). "
        "Ingest = shardlog's share (ingest Lambda + DynamoDB + S3); all-in adds a provisioned "
        "Kinesis shard. Consumers and compaction are per record they read; compaction counts "
        "an hourly EMR Serverless run per shard.",
        "",
        "| records/s per shard | record | ingest | all-in | worker | Lambda consumer "
        "| compaction | Firehose to S3 | Safya, all-in |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['ratePerShard']:,} | {r['recordBytes'] // 1024} KiB | "
            f"${r['ingestShare']:.4f} | ${r['allIn']:.4f} | ${r['worker']:.4f} | "
            f"${r['lambdaConsumer']:.4f} | ${r['compaction']:.4f} | ${r['firehose']:.4f} | "
            f"${r['safyaAllIn']:.4f} |"
        )
    return lines


def measure(full: bool) -> dict[str, Any]:
    """Run the benchmarks; what the page is rendered from (kept as build/bench/report.json)."""
    OUT.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    host = machine()
    speed = json.loads(run("speed.py", "--json"))["getItemCpuMs"]
    # The ingest ratios are goals: always the full run (50 batches interleaved, about a minute).
    ingest = json.loads(run("ingest.py", "--json"))
    quick = [] if full else ["--quick"]
    run("latency.py", *quick, "--json", str(OUT / "latency.json"))
    cost_out = run(
        "cost.py", *quick, "--json", str(OUT / "cost.json"), "--chart", str(OUT / "cost.png")
    )
    compact_args = ["--records", "1000000"] if full else ["--records", "200000"]
    compaction = json.loads(run("compact.py", "--json", *compact_args))
    return {
        "full": full,
        "started": f"{started:%Y-%m-%d %H:%M}",
        "host": host,
        "getItemCpuMs": speed,
        "ingest": ingest,
        "latency": json.loads((OUT / "latency.json").read_text()),
        "compactArgs": compact_args,
        "compaction": compaction,
        "cost": json.loads((OUT / "cost.json").read_text()),
        "costHeadline": cost_out.strip().splitlines()[-2:],
    }


def render(results: dict[str, Any]) -> str:
    """The generated block, markers included."""
    from bench.pricing import PRICES_AS_OF, REGION

    full = results["full"]
    mode = "" if full else " --quick"
    lines = [
        BEGIN,
        f"Generated by `make measured` (`bench/report.py{' --full' if full else ''}`) on "
        f"{results['started']} UTC; {results['host']}; a DynamoDB GetItem to the embedded AWS "
        f"cost {results['getItemCpuMs']:.2f} ms of CPU (`bench/speed.py`: compare machines by "
        "it). Everything runs against the embedded AWS (moto over HTTP; in the benchmark's "
        "process, except bench/latency.py's, in a process of its own as `local up` runs it) on "
        "this machine, shared with other work: absolute figures are noisy, ratios in one run "
        "less so.",
        "",
        *ingest_block(results["ingest"]),
        "",
        *latency_block(results["latency"], f"python bench/latency.py{mode}"),
        "",
        *compaction_block(
            results["compaction"], f"python bench/compact.py {' '.join(results['compactArgs'])}"
        ),
        "",
        *cost_block(results["cost"], f"python bench/cost.py{mode}", REGION, PRICES_AS_OF),
        "",
        "```",
        *results["costHeadline"],
        "```",
        "",
        "The chart: `build/bench/cost.png` (not committed). What the figures mean: the sections "
        "below.",
        END,
    ]
    return "\n".join(lines)


def rewrite(page: Path, generated: str) -> None:
    """Replace the page's generated block; a page without one is refused, unchanged."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page} has no {BEGIN} ... {END} block: nothing written")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    page.write_text(head + generated + tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the benchmarks' full runs")
    parser.add_argument(
        "--root", type=Path, default=REPO, help="the repository whose docs/PERFORMANCE.md to write"
    )
    parser.add_argument(
        "--from-results", type=Path, help="render this report.json again, run no benchmark"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the block, change nothing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.from_results is not None:
        results = json.loads(args.from_results.read_text())
    else:
        results = measure(args.full)
        (OUT / "report.json").write_text(json.dumps(results, indent=2) + "\n")
    generated = render(results)
    if args.dry_run:
        print(generated)
        return 0
    page = args.root / PAGE
    rewrite(page, generated)
    print(f"{page}: measured block rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
