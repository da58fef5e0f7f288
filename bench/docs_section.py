"""Write a benchmark's generated section into a markdown file (docs/performance.md).

One rule for every bench script's `--out`: the generated text replaces what stands under its heading
up to the next heading (`## ` or `### `), so the hand-written subsections under it (what the numbers
say, what was tried) are kept; a heading not yet in the file is appended with the text at the end.
"""

from __future__ import annotations

from pathlib import Path


def _heading_at(text: str, heading: str) -> int:
    """Where `heading` starts as a whole line of `text`, or -1 (so '## X' is not found in '### X')."""
    if text.startswith(heading + "\n"):
        return 0
    at = text.find("\n" + heading + "\n")
    return at + 1 if at >= 0 else -1


def replace_section(path: Path, heading: str, body: str) -> None:
    """Put `body` under `heading` in `path` (the heading is added when `body` does not start with
    it), replacing the section's generated part; re-read just before writing."""
    text = path.read_text() if path.exists() else "# Performance\n"
    body = body.strip("\n")
    if not body.startswith(heading):
        body = heading + "\n\n" + body
    start = _heading_at(text, heading)
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + body + "\n")
        return
    after = start + len(heading)
    ends = [i for i in (text.find(m, after) for m in ("\n## ", "\n### ")) if i >= 0]
    rest = text[min(ends) + 1 :] if ends else ""
    path.write_text(text[:start] + body + "\n" + ("\n" + rest if rest else ""))
