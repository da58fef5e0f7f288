"""A/B benchmark of two commits: the native and Kafka-path benchmarks, interleaved, ratio per metric.

    python bench/compare.py main HEAD                  # 3 rounds: A B A B A B, about 10 minutes
    python bench/compare.py main HEAD --rounds 5 --native-args "--quick --transport shm --no-kafka"
    python bench/compare.py main HEAD --instructions   # + callgrind counts (bench/instructions.py)

Each commit is checked out in its own git worktree (detached, under --workdir) with its own build
of the C extensions, and runs from a light virtualenv whose path holds that worktree first and
this interpreter's site-packages after it (the dependencies are shared, the project's code is
not; `rdmalog`, which the benchmarks start brokers with, is generated from the commit's own
pyproject.toml). Each round runs `bench/native.py` and `bench/kafka_protocol.py` for A, then for
B, so machine drift and other load hit both alike; `--bench-from B` runs B's benchmark scripts
against both commits' code (the same measurement), by default each commit runs its own.
`--instructions` adds, once per side, the client's instructions per operation (callgrind), which
load does not change. Printed per metric: the median of each side with its [min-max] over
rounds, and B/A of the medians with the [min-max] of the per-round ratios; "better"/"worse" when
at least 3 rounds all agree and the medians differ by more than 5%, "~" otherwise (within this
host's noise). A benchmark comparison, not a test: no threshold fails. Commit what you measure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOWER_IS_BETTER = {"us", "ms", "s", "instr"}
HIGHER_IS_BETTER = {"GiB/s", "1/s", "rec/s"}
# What a Kafka-protocol step line ("step" in it) reports, and the unit it is judged by.
KAFKA_FIELDS = {
    "records_per_s": "rec/s",
    "broker_cpu_s_per_M": "s",
    "client_cpu_s_per_M": "s",
    "p50_ms": "ms",
    "p99_ms": "ms",
}
# Builds the commit's extensions from its setup.py without reading its pyproject.toml (newer
# metadata than this venv's setuptools may parse): ext_modules are taken from setup() and built.
BUILD = """
import runpy, setuptools
captured = {}
setuptools.setup = lambda **kw: captured.update(kw)
runpy.run_path("setup.py")
dist = setuptools.Distribution(
    {"ext_modules": captured.get("ext_modules", []), "script_args": ["build_ext", "--inplace", "-q"]}
)
dist.parse_command_line()
dist.run_commands()
"""


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


class Checkout:
    """One commit: a detached worktree, its extensions built in place, a light venv to run it."""

    def __init__(self, label: str, rev: str, workdir: Path):
        self.label, self.rev = label, rev
        self.sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
        self.path = workdir / f"{label}-{self.sha[:10]}"
        self.venv = workdir / f"{label}-{self.sha[:10]}-venv"
        self.python = self.venv / "bin" / "python"
        self.created = False

    def prepare(self) -> None:
        if not (self.path / ".git").exists():
            git("worktree", "add", "--detach", str(self.path), self.sha)
            self.created = True
        log(f"{self.label}: {self.sha[:10]} {git('log', '-1', '--format=%s', self.sha)[:70]}")
        subprocess.run(
            [sys.executable, "-c", BUILD], cwd=self.path, check=True, capture_output=True
        )
        if not self.python.exists():
            subprocess.run(
                [sys._base_executable, "-m", "venv", "--without-pip", str(self.venv)], check=True
            )
        purelib = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        # the commit first; this interpreter's packages (not its editable install: a .pth line
        # adds a directory, it does not run the .pth files inside it)
        paths = [str(self.path), *site.getsitepackages()]
        Path(purelib, "_rdmalog_compare.pth").write_text("\n".join(paths) + "\n")
        scripts = tomllib.loads((self.path / "pyproject.toml").read_text())["project"]["scripts"]
        for name, target in scripts.items():
            module, func = target.split(":")
            script = self.venv / "bin" / name
            script.write_text(
                f"#!{self.python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n"
            )
            script.chmod(0o755)

    def run(self, script: Path, args: list[str], timeout: float) -> list[dict]:
        """The JSON lines `script` printed run against this commit's code (an empty list when
        it failed or the script does not exist there)."""
        if not script.exists():
            log(f"{self.label}: no {script.relative_to(script.parent.parent)}: skipped")
            return []
        cmd = [str(self.python), str(script), *args]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RDMALOG_BIN")}
        try:
            p = subprocess.run(
                cmd, cwd=self.path, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            log(f"{self.label}: {script} timed out after {timeout:.0f} s")
            return []
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1]
            log(f"{self.label}: {script} exited {p.returncode}: {tail}")
        lines = []
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return lines

    def remove(self) -> None:
        if self.created:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.path)],
                capture_output=True,
            )
        shutil.rmtree(self.venv, ignore_errors=True)


def native_metrics(lines: list[dict]) -> dict[str, tuple[float, str]]:
    """{name: (value, unit)} of bench/native.py's lines ("transport metric [mode]")."""
    out = {}
    for r in lines:
        if "metric" not in r or "value" not in r:
            continue
        name = f"native {r['transport']} {r['metric']}"
        for extra in ("mode", "at"):
            if extra in r:
                name += f" [{r[extra]}]"
        out[name] = (float(r["value"]), r.get("unit", ""))
    return out


def kafka_metrics(lines: list[dict]) -> dict[str, tuple[float, str]]:
    """{name: (value, unit)} of bench/kafka_protocol.py's per-step summary lines."""
    out = {}
    for r in lines:
        if "step" not in r or "test" not in r:
            continue
        for field, unit in KAFKA_FIELDS.items():
            if isinstance(r.get(field), int | float):
                out[f"kafka {r['broker']} {r['test']} {field}"] = (float(r[field]), unit)
    return out


def verdict(unit: str, ratio: float, ratios: list[float]) -> str:
    if len(ratios) < 3:
        return ""
    if unit in LOWER_IS_BETTER:
        better = all(x < 1 for x in ratios) and ratio < 0.95
        worse = all(x > 1 for x in ratios) and ratio > 1.05
    elif unit in HIGHER_IS_BETTER:
        better = all(x > 1 for x in ratios) and ratio > 1.05
        worse = all(x < 1 for x in ratios) and ratio < 0.95
    else:
        return ""
    return "better" if better else "worse" if worse else "~"


def ratios(rounds: list[dict[str, dict]]) -> list[tuple[str, float, float, float]]:
    """(metric, B/A of the medians, lowest and highest round's B/A) of metrics both sides have."""
    out = []
    for name in sorted({n for r in rounds for side in r.values() for n in side}):
        av = [r["A"][name][0] for r in rounds if name in r["A"]]
        bv = [r["B"][name][0] for r in rounds if name in r["B"]]
        pairs = [
            r["B"][name][0] / r["A"][name][0]
            for r in rounds
            if name in r["A"] and name in r["B"] and r["A"][name][0]
        ]
        am = statistics.median(av) if av else 0
        if pairs and am:
            out.append((name, statistics.median(bv) / am, min(pairs), max(pairs)))
    return out


def report(a: Checkout, b: Checkout, rounds: list[dict[str, dict]]) -> str:
    names = sorted({n for r in rounds for side in r.values() for n in side})
    rows = [
        f"A = {a.rev} ({a.sha[:10]}), B = {b.rev} ({b.sha[:10]}), {len(rounds)} round(s) A B "
        f"(instruction counts: one run each)",
        "",
        "| metric | unit | A median [min-max] | B median [min-max] | B/A [min-max per round] | |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for name in names:
        av = [r["A"][name][0] for r in rounds if name in r["A"]]
        bv = [r["B"][name][0] for r in rounds if name in r["B"]]
        unit = next(r[s][name][1] for r in rounds for s in "AB" if name in r[s])
        if not av or not bv:
            rows.append(f"| {name} | {unit} | {len(av)} run(s) | {len(bv)} run(s) | | |")
            continue
        am, bm = statistics.median(av), statistics.median(bv)
        pairs = [
            r["B"][name][0] / r["A"][name][0]
            for r in rounds
            if name in r["A"] and name in r["B"] and r["A"][name][0]
        ]
        ratio = bm / am if am else float("nan")
        spread = f"[{min(pairs):.2f}-{max(pairs):.2f}]" if pairs else ""
        rows.append(
            f"| {name} | {unit} | {am:.4g} [{min(av):.4g}-{max(av):.4g}] "
            f"| {bm:.4g} [{min(bv):.4g}-{max(bv):.4g}] | {ratio:.3f} {spread} "
            f"| {verdict(unit, ratio, pairs) if pairs else ''} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="the baseline: a commit, branch or tag (e.g. main)")
    ap.add_argument("b", help="the change (e.g. HEAD); commit what you measure")
    ap.add_argument("--rounds", type=int, default=3, help="A B pairs (default 3)")
    ap.add_argument("--native-args", default="--quick", help="bench/native.py's arguments")
    ap.add_argument(
        "--kafka-args", default="--quick --brokers rdmalog", help="bench/kafka_protocol.py's"
    )
    ap.add_argument(
        "--bench-from", choices=["own", "A", "B"], default="own",
        help="whose bench/ scripts run against both commits (default: each its own)",
    )  # fmt: skip
    ap.add_argument("--instructions", action="store_true", help="also bench/instructions.py")
    ap.add_argument("--skip-native", action="store_true")
    ap.add_argument("--skip-kafka", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark run")
    ap.add_argument("--workdir", type=Path, help="where the worktrees go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the worktrees (reused next time)")
    ap.add_argument("--json", type=Path, help="also write every round's metrics here")
    ap.add_argument("--plot", type=Path, help="draw B/A per metric to this PNG (bench/plots.py)")
    ap.add_argument("--from-json", type=Path, help="report (and plot) a run saved with --json")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        a, b = Checkout("A", saved["a"], Path(".")), Checkout("B", saved["b"], Path("."))
        a.sha, b.sha = saved["a"], saved["b"]
        _finish(args, a, b, saved["rounds"])
        return

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rdmalog-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    a, b = Checkout("A", args.a, workdir), Checkout("B", args.b, workdir)
    benches = []
    if not args.skip_native:
        benches.append(("bench/native.py", shlex.split(args.native_args), native_metrics))
    if not args.skip_kafka:
        benches.append(("bench/kafka_protocol.py", shlex.split(args.kafka_args), kafka_metrics))
    rounds: list[dict[str, dict]] = []
    try:
        for c in (a, b):
            c.prepare()
        for i in range(args.rounds):
            rnd: dict[str, dict] = {"A": {}, "B": {}}
            for side, c in (("A", a), ("B", b)):
                home = {"own": c, "A": a, "B": b}[args.bench_from].path
                extra = []
                if args.instructions and i == 0:
                    extra = [("bench/instructions.py", [], native_metrics)]
                for script, bench_args, parse in benches + extra:
                    log(f"round {i + 1}/{args.rounds}: {side} {script}")
                    rnd[side].update(parse(c.run(home / script, bench_args, args.timeout)))
            rounds.append(rnd)
    finally:
        if not args.keep:
            for c in (a, b):
                c.remove()
            if args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"a": a.sha, "b": b.sha, "rounds": rounds}, indent=1))
    print(f"load average now: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    _finish(args, a, b, rounds)


def _finish(args: argparse.Namespace, a: Checkout, b: Checkout, rounds: list[dict]) -> None:
    print(report(a, b, rounds))
    if args.plot:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from plots import ratio_chart

        title = f"B = {b.rev[:24]} / A = {a.rev[:24]}, {len(rounds)} rounds"
        ratio_chart(args.plot, title, ratios(rounds))
        print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
