"""Every relative link in docs/ resolves: to a file or folder of the repository, and to a heading where
it names one (`page.md#anchor`, GitHub's anchors). A page moved or a section renamed breaks the link
here, not for the reader."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    out: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", ""))
            out.add(text.replace(" ", "-"))
    return out


def _rel(p: Path) -> Path:
    """`p` from the repository's root where it lies in it."""
    return p.relative_to(ROOT) if p.is_relative_to(ROOT) else p


def broken_links(page: Path) -> list[str]:
    """The relative links of a markdown page that resolve to nothing, as 'target: why'."""
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    return bad


def test_every_relative_link_in_docs_resolves() -> None:
    pages = sorted(DOCS.rglob("*.md"))
    assert pages, "no pages under docs/"
    bad = {str(p.relative_to(ROOT)): b for p in pages if (b := broken_links(p))}
    assert not bad, "broken links in docs/: " + "; ".join(f"{p}: {', '.join(b)}" for p, b in bad.items())


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# B page\n\n## The `hold`, and why\n")
    page.write_text(
        "[ok](b.md) [ok](b.md#the-hold-and-why) [gone](c.md) [no anchor](b.md#nothing) "
        "[web](https://example.com/x) [self](#top)\n```\n[in code](nowhere.md)\n```\n# Top\n"
    )
    missing_anchor = f"b.md#nothing: no heading #nothing in {_rel(tmp_path / 'b.md')}"
    assert broken_links(page) == ["c.md: no such file", missing_anchor]
