"""OSPBench reporting: per-run summaries, the tables, the plot and the docs/performance.md section."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
from collections import defaultdict
from pathlib import Path

from docs_section import replace_section  # bench/ is on sys.path (run.py, floor.py)

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Spark streaming event delay (KafkaDirect 5.4)"
SOURCE_NAMES = {
    "rdmalog-jvm": "rdmalog, JVM reader (native tcp)",
    "rdmalog-tcp": "rdmalog, Python source (native tcp)",
    "rdmalog-shm": "rdmalog, Python source (native shm)",
    "rdmalog-kafka": "rdmalog, Python source (Kafka protocol)",
    "kafka": "spark-sql-kafka",
}
MODE_NAMES = {
    "microbatch": "micro-batch",
    "realtime": "real-time mode",
    "continuous": "continuous",
}


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile of a sorted-able sequence."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype="float64"), q))


def name(source: str) -> str:
    return SOURCE_NAMES.get(source, source)


def summarize(key: dict, rundir: Path, produced: dict) -> dict:
    """Delay percentiles of one run from events.parquet, and whether the job kept up."""
    import pandas as pd

    out = key | {"sent": produced["sent"]}
    path = rundir / "events.parquet"
    if not path.exists():
        return out | {"error": f"no events; see {rundir}"}
    ev = pd.read_parquet(path)
    ev = ev[ev["gen_ms"].notna()]  # warm-up rows (real-time and continuous modes keep them)
    out["events"] = len(ev)
    if ev.empty:
        return out | {"error": "the job read no events"}
    ev = ev.sort_values("gen_ms")
    delay = ev["read_ms"] - ev["gen_ms"]
    quarter = max(1, len(ev) // 4)
    head, tail = delay.iloc[:quarter], delay.iloc[-quarter:]
    out |= {
        "p50_ms": percentile(delay, 50),
        "p95_ms": percentile(delay, 95),
        "p99_ms": percentile(delay, 99),
        "mean_ms": float(delay.mean()),
        "max_ms": float(delay.max()),
        "append_p50_ms": percentile(ev["read_ms"] - ev["kafka_ms"], 50),
        "msg_per_s": produced["sent"] / produced["seconds"],
        # kept up: every event read, and no backlog growing over the run
        "sustained": bool(
            len(ev) >= produced["sent"] and percentile(tail, 50) <= 2 * percentile(head, 50) + 100.0
        ),
    }
    if "batch_ms" in ev:
        out |= {
            "to_plan_p50_ms": percentile(ev["batch_ms"] - ev["gen_ms"], 50),
            "plan_to_read_p50_ms": percentile(ev["read_ms"] - ev["batch_ms"], 50),
            "batches": int(ev["batch_id"].nunique()),
            "batch_ms": batch_time(rundir),
        }
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def batch_time(rundir: Path) -> float:
    """Median Spark triggerExecution (ms) of the micro-batches that had rows."""
    import pandas as pd

    try:
        p = pd.read_csv(rundir / "progress.csv")
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return float("nan")
    p = p[p["rows"] > 0]
    return float(p["triggerExecution"].median()) if len(p) else float("nan")


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Runs by (workload, mode, source, rate), in the order they first ran."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["workload"], r["mode"], r["source"], r["rate"])].append(r)
    return out


def _cell(runs: list[dict], field: str, fmt: str = "{:.1f}") -> str:
    """The median of the runs' `field`, with [min-max] when there are several."""
    vals = [r[field] for r in runs if field in r]
    if not vals:
        return "-"
    mid = fmt.format(statistics.median(vals))
    if len(vals) == 1:
        return mid
    return f"{mid} [{fmt.format(min(vals))}-{fmt.format(max(vals))}]"


def _median(runs: list[dict], field: str) -> float | None:
    vals = [r[field] for r in runs if field in r]
    return statistics.median(vals) if vals else None


def _not_run(runs: list[dict]) -> str | None:
    ok = [r for r in runs if "p50_ms" in r]
    if ok:
        return None
    return runs[0].get("skipped") or runs[0].get("error") or "no result"


def tables(rows: list[dict], rate: float) -> str:
    """The micro-batch table, the low-latency modes table, best modes, ratios, the rate sweep."""
    groups = _groups(rows)
    out = []
    head = (
        "| workload | source | events | p50 ms | p95 ms | p99 ms | max ms | p50 generated->"
        "planned | p50 planned->read | micro-batches | ms per batch |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = []
    for (pattern, mode, source, r), runs in groups.items():
        if mode != "microbatch" or r != rate:
            continue
        why = _not_run(runs)
        if why:
            lines.append(f"| {pattern} | {name(source)} | not run: {why} |||||||||")
            continue
        ev = f"{_cell(runs, 'events', '{:.0f}')}/{_cell(runs, 'sent', '{:.0f}')}"
        lines.append(
            f"| {pattern} | {name(source)} | {ev} | {_cell(runs, 'p50_ms')} | "
            f"{_cell(runs, 'p95_ms')} | {_cell(runs, 'p99_ms')} | {_cell(runs, 'max_ms')} | "
            f"{_cell(runs, 'to_plan_p50_ms')} | {_cell(runs, 'plan_to_read_p50_ms')} | "
            f"{_cell(runs, 'batches', '{:.0f}')} | {_cell(runs, 'batch_ms', '{:.0f}')} |"
        )
    if lines:
        out += ["Micro-batch (the OSPBench stage: parse, filter, per-lane join):", "", head]
        out += lines + [""]
    head = (
        "| workload | mode | source | events | p50 ms | p95 ms | p99 ms | max ms |\n"
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = []
    for (pattern, mode, source, r), runs in groups.items():
        if mode == "microbatch" or r != rate:
            continue
        why = _not_run(runs)
        if why:
            lines.append(
                f"| {pattern} | {MODE_NAMES[mode]} | {name(source)} | not run: {why} |||||"
            )
            continue
        ev = f"{_cell(runs, 'events', '{:.0f}')}/{_cell(runs, 'sent', '{:.0f}')}"
        lines.append(
            f"| {pattern} | {MODE_NAMES[mode]} | {name(source)} | {ev} | {_cell(runs, 'p50_ms')} | "
            f"{_cell(runs, 'p95_ms')} | {_cell(runs, 'p99_ms')} | {_cell(runs, 'max_ms')} |"
        )
    if lines:
        out += ["Real-time mode and continuous processing (parse and filter stage):", "", head]
        out += lines + [""]
    out += _best_and_ratios(groups, rate)
    out += _sweep(groups, rate)
    return "\n".join(out) + "\n"


def _best_and_ratios(groups: dict[tuple, list[dict]], rate: float) -> list[str]:
    """Each source's best mode side by side, and rdmalog's p50/p99 against spark-sql-kafka's."""
    best: dict[tuple[str, str], tuple[str, list[dict]]] = {}
    for (pattern, mode, source, r), runs in groups.items():
        p50 = _median(runs, "p50_ms")
        if r != rate or p50 is None:
            continue
        if (pattern, source) not in best or p50 < _median(best[(pattern, source)][1], "p50_ms"):
            best[(pattern, source)] = (mode, runs)
    out = []
    if best:
        out += [
            "Each source's best mode:",
            "",
            "| workload | source | best mode | p50 ms | p99 ms |",
            "| --- | --- | --- | ---: | ---: |",
        ]
        for (pattern, source), (mode, runs) in best.items():
            out.append(
                f"| {pattern} | {name(source)} | {MODE_NAMES[mode]} | {_cell(runs, 'p50_ms')} | "
                f"{_cell(runs, 'p99_ms')} |"
            )
        out.append("")
    ratios = []
    for (pattern, mode, source, r), runs in groups.items():
        ref = groups.get((pattern, mode, "kafka", r))
        if r != rate or source == "kafka" or not ref:
            continue
        ours, theirs = _median(runs, "p50_ms"), _median(ref, "p50_ms")
        if not ours or theirs is None:
            continue
        p99 = (_median(runs, "p99_ms"), _median(ref, "p99_ms"))
        ratios.append(
            f"- {pattern}, {MODE_NAMES[mode]}: spark-sql-kafka p50 / {name(source)} p50 = "
            f"{theirs / ours:.2f}x (goal >= 3x; KafkaDirect: 3.3x); p99 {p99[0]:.1f} vs "
            f"{p99[1]:.1f} ms"
        )
    for pattern in sorted({p for p, _ in best}):
        if (pattern, "kafka") in best and (pattern, "rdmalog-jvm") in best:
            (m1, a), (m2, b) = best[(pattern, "rdmalog-jvm")], best[(pattern, "kafka")]
            ratios.append(
                f"- {pattern}, best against best: spark-sql-kafka ({MODE_NAMES[m2]}) p50 / rdmalog "
                f"JVM reader ({MODE_NAMES[m1]}) p50 = "
                f"{_median(b, 'p50_ms') / _median(a, 'p50_ms'):.2f}x"
            )
    return out + (ratios + [""] if ratios else [])


def _sweep(groups: dict[tuple, list[dict]], rate: float) -> list[str]:
    """The constant-rate sweep: how each source keeps up as the rate grows."""
    lines = []
    for (_pattern, mode, source, r), runs in sorted(
        groups.items(), key=lambda kv: (kv[0][3], kv[0][2])
    ):
        if r == rate or mode != "microbatch":
            continue
        why = _not_run(runs)
        if why:
            lines.append(f"| {r:g} | {name(source)} | not run: {why} ||||")
            continue
        ev = f"{_cell(runs, 'events', '{:.0f}')}/{_cell(runs, 'sent', '{:.0f}')}"
        kept = "yes" if all(x.get("sustained") for x in runs) else "no"
        lines.append(
            f"| {r:g} ({_cell(runs, 'msg_per_s', '{:.0f}')} sent/s) | {name(source)} | {ev} | "
            f"{_cell(runs, 'p50_ms')} | {_cell(runs, 'p99_ms')} | {kept} |"
        )
    if not lines:
        return []
    return [
        "Throughput (micro-batch, constant workload, rising rate; kept up = every event read and "
        "the last quarter's p50 at most twice the first quarter's + 100 ms):",
        "",
        "| msg/s | source | events | p50 ms | p99 ms | kept up |",
        "| --- | --- | ---: | ---: | ---: | --- |",
        *lines,
        "",
    ]


def reads_table(reads: list[dict]) -> str:
    """Markdown lines for the Spark-free range reads."""
    ok = [r for r in reads if "p50_ms" in r]
    if not ok:
        return ""
    lines = [
        f"Without Spark: the Python source's read_range() of {ok[0]['records']} new records per "
        f"call, {ok[0].get('reads', 15)} consecutive ranges as consecutive micro-batch tasks in "
        "one Python worker read them. The first call creates the client; the later ones reuse "
        "it from the source's per-worker pool:",
        "",
        "| source | first call ms | pooled p50 ms | pooled p95 ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in ok:
        lines.append(
            f"| {name(r['source'])} | {r['first_ms']:.1f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], results: Path, png: Path, rate: float) -> None:
    """Per workload: the delay CDF of each (source, mode) at the base rate, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    patterns = [p for p in ("constant", "burst") if any(r["workload"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(patterns), figsize=(7 * len(patterns), 5), squeeze=False)
    for col, pattern in enumerate(patterns):
        ax = axes[0][col]
        for (pat, mode, source, r), runs in _groups(rows).items():
            ok = [x for x in runs if "p50_ms" in x]
            if pat != pattern or r != rate or not ok:
                continue
            ev = pd.concat(pd.read_parquet(results / x["dir"] / "events.parquet") for x in ok)
            ev = ev[ev["gen_ms"].notna()]
            xs = np.sort((ev["read_ms"] - ev["gen_ms"]).to_numpy())
            label = f"{name(source)}, {MODE_NAMES[mode]} (p50 {_median(ok, 'p50_ms'):.1f} ms)"
            ax.plot(np.maximum(xs, 0.01), np.arange(1, len(xs) + 1) / len(xs), label=label)
        ax.set_title(f"{pattern} workload: event delay CDF")
        ax.set_xscale("log")
        ax.set_xlabel("delay: Spark read - generated (ms, log scale)")
        ax.set_ylabel("fraction of events")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Spark structured streaming event delay (OSPBench, KafkaDirect 5.4)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)


def section(
    args: argparse.Namespace, argv: list[str], tbl: str, png: Path, load: float | None = None
) -> str:
    """Our docs/performance.md section: command, date, machine, tables, plot, method."""
    import pyspark

    load = os.getloadavg()[0] if load is None else load
    burst = args.burst_size if args.burst_size is not None else int(args.rate * 10)
    producer = (
        "confluent-kafka (linger.ms=0, acks=1)"
        if args.producer == "kafka"
        else "native rdmalog.rdma.Producer"
    )
    rel_png = os.path.relpath(png, ROOT / "docs")
    cmd = "python bench/ospbench/run.py " + " ".join(argv)
    return f"""{SECTION}

KafkaDirect section 5.4 / Figure 21: the delay between an event's generation and the moment Spark
read it, OSPBench's NDW traffic workload (JSON flow and speed per lane on `ndwflow` and `ndwspeed`,
LogAppendTime), constant rate and a burst every 10 s. Method and code: `bench/ospbench/`.

- Command: `{cmd.strip()}`
- Date: {datetime.datetime.now().strftime("%Y-%m-%d %H:%M")} UTC; machine: {os.cpu_count()} cores,
  {platform.machine()}, Python {platform.python_version()}, pyspark {pyspark.__version__}, load
  average {load:.1f} at the end (the cores are shared with other work).
- Workload: {args.rate:g} messages/s over both topics for {args.duration:g} s per run; `burst` adds
  {burst} messages at once every 10 s; producer: {producer}.
- Spark: `local[2]` (continuous: `local[3]`, a core per partition plus one), one fresh broker (`rdmalog serve`, native datapath on tcp; shm for the shm
  source) and Spark process per run, {args.warmup:g} s of warm-up traffic excluded. Micro-batch:
  foreachBatch, processing-time trigger {args.trigger_ms} ms. Real-time mode: batches of
  {args.realtime_ms} ms, a `foreach` sink. Continuous: checkpoints every {args.continuous_ms} ms,
  the memory sink.
- Delay = the executor JVM's clock (microseconds) where the row leaves the source - the JSON's
  generation time. In micro-batch mode it splits into generated -> micro-batch planned (waiting
  for the running batch to end, then planning) and planned -> read (task launch, the source's
  read). "ms per batch" is Spark's median triggerExecution.

{tbl}
![event delay CDFs]({rel_png})
"""


def finish(
    args: argparse.Namespace, argv: list[str], results: Path, rows: list[dict], reads: list[dict]
) -> int:
    """Tables, plot and (unless --no-docs) the docs section of a finished run."""
    tbl = tables(rows, args.rate) + reads_table(reads)
    print()
    print(tbl)
    if any("p50_ms" in r for r in rows):
        png = Path(args.plot)
        plot(rows, results, png, args.rate)
        if not args.no_docs:
            replace_section(Path(args.out), SECTION, section(args, argv, tbl, png))
    return 0


def report_existing(ap: argparse.ArgumentParser, args: argparse.Namespace, results: Path) -> int:
    """Table, plot and section again from a finished run's rows.json (e.g. after a plot change)."""
    saved = json.loads((results / "rows.json").read_text())
    run_args = ap.parse_args(saved["argv"])  # the settings of the run, for the section
    if run_args.duration is None:
        run_args.duration = 15.0 if run_args.quick else 45.0
    run_args.plot, run_args.no_docs, run_args.out = args.plot, args.no_docs, args.out
    return finish(run_args, saved["argv"], results, saved["rows"], saved["reads"])
