"""docs/index.md links every page of the site's navigation (mkdocs.yml)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_index_links_every_page_of_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("nav:", 1)[1]
    pages = set(re.findall(r":\s+([\w/-]+\.md)\s*$", nav, re.M)) - {"index.md"}
    assert len(pages) > 20
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w/-]+\.md)\)", index))
    assert not pages - linked, f"docs/index.md does not link {sorted(pages - linked)}"
