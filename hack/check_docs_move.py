"""Check that the docs restructure (issue 43) lost nothing: every paragraph, list item, table row
and code block of the README and docs/*.md at a revision appears on some page of today's docs
(docs/**/*.md or README.md).

    python3 hack/check_docs_move.py [REV]     # REV: the revision before the move (default bc86701)

Texts are compared after normalising what the move had to change: whitespace, Markdown link
targets (pages moved), emphasis marks, a paragraph's bold lead-in turned into a heading
(`**Keys.** Among…` → `## Keys` + `Among…`), and `\\|` inside code spans of tables. A block found
only with small edits (a "see *Keys* below" that became a link) is listed as edited, with its
similarity; exit 1 when a block is missing (found nowhere at 90 % similarity or more).
"""
from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLD_FILES = ["README.md", "docs/install.md", "docs/operations.md", "docs/dashboard.md"]


def blocks(text: str) -> list[str]:
    """Paragraphs, list items, table rows and whole code blocks, in order (not headings)."""
    out: list[str] = []
    current: list[str] = []
    fence: list[str] | None = None

    def flush() -> None:
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        if fence is not None:
            fence.append(line)
            if line.startswith("```"):
                out.append("\n".join(fence))
                fence = None
            continue
        if line.startswith("```"):
            flush()
            fence = [line]
        elif not line.strip() or line.startswith("#"):
            flush()
            # headings are titles, not statements: renamed with the pages ("TaskPool reference" → "TaskPool")
        elif line.startswith("|") or re.match(r"\s*([-*]|\d+\.) ", line) and not line.startswith("  "):
            flush()
            if line.startswith("|"):
                out.append(line)
            else:
                current.append(line)
        else:
            current.append(line.strip())
    flush()
    return out


def normal(text: str) -> str:
    text = re.sub(r"^\*\*([^*]+?)\.\*\* ", r"\1 ", text)  # a bold lead-in that became a heading
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # link targets changed with the pages
    text = text.replace("\\|", "|").replace("**", "").replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else "bc86701"
    new_pages = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]
    new_blocks = [normal(b) for p in new_pages for b in blocks(p.read_text())]
    corpus = "\n".join(new_blocks)
    checked = edited = 0
    missing: list[tuple[str, str]] = []
    for name in OLD_FILES:
        old = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{name}"], capture_output=True, text=True,
                             check=True).stdout
        for block in blocks(old):
            text = normal(block)
            if not text or re.fullmatch(r"[|\- ]+", text):  # table rules
                continue
            checked += 1
            if text in corpus:
                continue
            best = max((difflib.SequenceMatcher(None, text, b, autojunk=False).ratio(), b) for b in new_blocks
                       if abs(len(b) - len(text)) < 0.3 * len(text) + 40)
            if best[0] >= 0.9:
                edited += 1
                print(f"edited ({best[0]:.0%}) {name}: {text[:100]}")
            else:
                missing.append((name, text))
    for name, text in missing:
        print(f"MISSING {name}: {text[:160]}")
    print(f"{checked} blocks of {', '.join(OLD_FILES)} at {rev}: {checked - edited - len(missing)} found as they "
          f"were, {edited} with small edits, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
