"""Writes docs/presets.md: every zoo preset's model card, with a table first.

The cards are the `README.md` of each folder of the repository's `zoo/`;
this page gathers them for the documentation site. `tests/test_presets_page.py`
fails when the page and the cards differ: run this after editing a card.

    python tools/make_presets_page.py
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "zoo"
PAGE = ROOT / "docs" / "presets.md"
FIELDS = ("Class", "Parameters", "Weights")

HEADER = """# Presets

The zoo's presets, one model card each (the `README.md` of each folder of
`zoo/`; this page is generated from them by `tools/make_presets_page.py`).
`keras-tfm presets` lists them with the command that fits each, and any of
them loads with `keras_tfm.zoo.from_preset(name)` or the class's own
`from_preset` ([getting started](getting-started.md)).
"""


def card_fields(card):
    """The card's Class, Parameters and Weights rows, e.g. `{"Class": "..."}`."""
    rows = re.findall(r"^\| *([A-Za-z]+) *\| *(.*?) *\|$", card, re.M)
    return {key: value for key, value in rows if key in FIELDS}


def summary(card):
    """The card's first paragraph after its title, as one line."""
    paragraph = card.split("\n\n")[1] if "\n\n" in card else ""
    return " ".join(paragraph.split())


def demoted(card):
    """The card with each Markdown heading one level down (code blocks left
    alone), so that its title is a section of the page."""
    lines, fenced = [], False
    for line in card.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,5} ", line):
            line = "#" + line
        lines.append(line)
    return "\n".join(lines)


def render(zoo=ZOO):
    """The text of docs/presets.md for the cards under `zoo`."""
    cards = {
        folder.name: (folder / "README.md").read_text(encoding="utf-8").strip()
        for folder in sorted(zoo.iterdir())
        if (folder / "README.md").is_file()
    }
    table = ["| preset | class | parameters | weights | what it is |"]
    table.append("|---|---|---|---|---|")
    for name, card in cards.items():
        fields = card_fields(card)
        cells = [f"[{name}](#{name})", *(fields.get(key, "") for key in FIELDS)]
        first = summary(card).split(". ")[0].rstrip(".")
        table.append("| " + " | ".join([*cells, first.replace("|", "/")]) + " |")
    sections = [demoted(card) for card in cards.values()]
    return "\n\n".join([HEADER.strip(), "\n".join(table), *sections]) + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
