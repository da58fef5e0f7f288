"""Where a micro-batch's time goes, from Spark's own events: the query's progress events (durationMs
per phase, posted to the listener bus as StreamingQueryListener.QueryProgressEvent) and the
jobs, stages and tasks each batch ran (the same bus, as job.py's event log records it).

    python bench/ospbench/breakdown.py RUNDIR [RUNDIR ...]     # micro-batch runs of run.py

Prints a markdown table: one row per phase, one column per run (its source), each cell the median
over the run's batches that read rows. Phases, in the order a batch runs them:

- wait before the batch: from the previous batch's end to this one's start (the trigger);
- latestOffset: the source's driver-side lookup of where the partitions end;
- queryPlanning, walCommit (the offset log), getBatch: Spark's planning and bookkeeping;
- addBatch: running the batch, split into the source's stage (from its submission: the wait for
  the first task's launch, the task's deserialization, the slowest task's run: the read, and for a
  Python source the Python worker and the Arrow hop, then the parse and the shuffle write), the
  other stages (the per-lane window, the collect), and the driver's own time (foreachBatch: the
  Arrow collect to pandas, the Python callback);
- commitOffsets (the commit log), and the batch's total (triggerExecution).

On a loaded machine a task's wall time is mostly waiting for a core; the source stage's CPU time
(per row read) compares sources without that. It counts the executor JVM's threads only: a
Python source's Python worker is not in it.
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
PHASES = [
    ("wait_ms", "wait before the batch (trigger)"),
    ("latestOffset", "latestOffset (source, driver)"),
    ("queryPlanning", "queryPlanning"),
    ("walCommit", "walCommit (offset log)"),
    ("getBatch", "getBatch"),
    ("addBatch", "addBatch (run the batch)"),
    ("launch_ms", "- source stage: submitted -> first task launched"),
    ("deserialize_ms", "- source task: deserialize"),
    ("run_ms", "- source task: run (read, Python worker + Arrow for a Python source, parse)"),
    ("source_stage_ms", "- source stage, in all"),
    ("cpu_ms", "- source stage: CPU time of its tasks, summed"),
    ("cpu_us_per_row", "- source stage: CPU us per row read (load-independent)"),
    ("other_stages_ms", "- other stages (window, collect)"),
    ("driver_ms", "- driver (collect to pandas, foreachBatch callback)"),
    ("commitOffsets", "commitOffsets (commit log)"),
    ("triggerExecution", "triggerExecution (the batch in all)"),
]


def _ms(stamp: str) -> float:
    """Epoch ms of a progress event's ISO timestamp."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000.0


def batches(eventlog: Path) -> list[dict]:
    """Per batch that read rows: its phases (see PHASES), from one application's event log."""
    progress: dict[int, dict] = {}
    jobs: dict[int, dict] = {}
    job_batch: dict[int, int] = {}
    stage_times: dict[int, dict] = {}
    tasks: dict[int, list[dict]] = defaultdict(list)
    for line in eventlog.open():
        e = json.loads(line)
        kind = e["Event"]
        if kind == PROGRESS:
            p = e["progress"]
            progress[p["batchId"]] = p
        elif kind == "SparkListenerJobStart":
            batch = e.get("Properties", {}).get("streaming.sql.batchId")
            if batch is not None:
                job_batch[e["Job ID"]] = int(batch)
                jobs[e["Job ID"]] = {"start": e["Submission Time"], "stages": e["Stage IDs"]}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            if "Submission Time" in info:
                stage_times[info["Stage ID"]] = {
                    "submitted": info["Submission Time"],
                    "completed": info.get("Completion Time", info["Submission Time"]),
                }
        elif kind == "SparkListenerTaskEnd":
            tasks[e["Stage ID"]].append(
                {
                    "launch": e["Task Info"]["Launch Time"],
                    "deserialize": e["Task Metrics"]["Executor Deserialize Time"],
                    "run": e["Task Metrics"]["Executor Run Time"],
                    "cpu": e["Task Metrics"]["Executor CPU Time"] / 1e6,
                }
            )
    by_batch: dict[int, list[dict]] = defaultdict(list)
    for job_id, job in jobs.items():
        by_batch[job_batch[job_id]].append(job)
    out = []
    previous_end = None
    for batch_id in sorted(progress):
        p = progress[batch_id]
        d = dict(p["durationMs"])
        start = _ms(p["timestamp"])
        wait = None if previous_end is None else max(0.0, start - previous_end)
        previous_end = start + d.get("triggerExecution", 0)
        read = sum(src.get("numInputRows", 0) for src in p.get("sources", []))
        if not read or not by_batch.get(batch_id):
            continue
        ran = [s for job in by_batch[batch_id] for s in job["stages"] if s in stage_times]
        if not ran:
            continue
        first = min(ran)
        stage = stage_times[first]
        first_tasks = tasks.get(first, [])
        job_ms = sum(j.get("end", j["start"]) - j["start"] for j in by_batch[batch_id])
        row = {k: d.get(k) for k in ("latestOffset", "queryPlanning", "walCommit", "getBatch")}
        row |= {k: d.get(k) for k in ("addBatch", "commitOffsets", "triggerExecution")}
        row |= {
            "batch": batch_id,
            "rows": read,
            "wait_ms": wait,
            "source_stage_ms": stage["completed"] - stage["submitted"],
            "other_stages_ms": sum(
                stage_times[s]["completed"] - stage_times[s]["submitted"] for s in ran if s != first
            ),
            "driver_ms": (d.get("addBatch") or 0) - job_ms,
        }
        if first_tasks:
            row |= {
                "launch_ms": min(t["launch"] for t in first_tasks) - stage["submitted"],
                "deserialize_ms": max(t["deserialize"] for t in first_tasks),
                "run_ms": max(t["run"] for t in first_tasks),
                "cpu_ms": sum(t["cpu"] for t in first_tasks),
                "cpu_us_per_row": 1000.0 * sum(t["cpu"] for t in first_tasks) / read,
            }
        out.append(row)
    return out


def eventlog_of(rundir: Path) -> Path:
    files = sorted((rundir / "eventlog").glob("*"))
    if not files:
        raise FileNotFoundError(f"no event log in {rundir}/eventlog (a micro-batch run of job.py)")
    return files[0]


def table(rundirs: list[Path], names: list[str] | None = None) -> str:
    """The markdown table of median phase times, one column per run."""
    columns = []
    for rundir in rundirs:
        rows = batches(eventlog_of(rundir))
        medians = {}
        for key, _ in PHASES:
            vals = [r[key] for r in rows if r.get(key) is not None]
            medians[key] = statistics.median(vals) if vals else None
        columns.append((rows, medians))
    names = names or [d.name for d in rundirs]
    head = "| phase (median ms per batch that read rows) | " + " | ".join(names) + " |"
    lines = [head, "| --- |" + " ---: |" * len(names)]
    lines.append(
        "| batches that read rows (median rows) | "
        + " | ".join(
            f"{len(rows)} ({statistics.median(r['rows'] for r in rows):.0f})" if rows else "-"
            for rows, _ in columns
        )
        + " |"
    )
    for key, label in PHASES:
        cells = ["-" if m[key] is None else f"{m[key]:.0f}" for _, m in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__)
        return 2
    print(table([Path(a) for a in argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
