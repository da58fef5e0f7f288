"""Summarize a py-spy raw (collapsed-stack) profile: top functions by self and inclusive share."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(.*) (\d+)$")
# leaf frames where a thread waits rather than computes (py-spy --nonblocking still samples them)
IDLE_LEAVES = ("EpollSelector.select", "Condition.wait", "Event.wait", "Lock.acquire")


def frames(stack: str, keep_lines: bool) -> list[str]:
    """Frames of one collapsed stack, root first, as 'function (file)' or with line numbers."""
    out = []
    for f in stack.split(";"):
        f = f.strip()
        if not keep_lines:
            f = re.sub(r":\d+\)$", ")", f)
        out.append(f)
    return out


def summarize(path: Path, top: int = 25, keep_lines: bool = False, busy: bool = True) -> str:
    """Text report: total samples, then top self and inclusive entries with percentages
    (of busy samples, i.e. without idle waits, unless busy is False)."""
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        n = int(m.group(2))
        fs = frames(m.group(1), keep_lines)
        # skip the process/thread prefix frames py-spy adds (they have no parentheses)
        fs = [f for f in fs if "(" in f] or fs
        if busy and fs[-1].startswith(IDLE_LEAVES):
            idle += n
            continue
        total += n
        self_c[fs[-1]] += n
        for f in set(fs):
            incl_c[f] += n
    what = "busy samples" if busy else "samples"
    lines = [f"{path.name}: {total} {what}" + (f" ({idle} idle left out)" if busy else "")]
    for title, c in (("self", self_c), ("inclusive", incl_c)):
        lines.append(f"  top {title}:")
        for f, n in c.most_common(top):
            lines.append(f"    {100.0 * n / max(total, 1):5.1f}%  {f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--lines", action="store_true", help="keep line numbers")
    ap.add_argument("--all", action="store_true", help="count idle waits too")
    args = ap.parse_args()
    for f in args.files:
        print(summarize(f, args.top, args.lines, busy=not args.all))


if __name__ == "__main__":
    main()
