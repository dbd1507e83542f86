"""docs/presets.md is the zoo's model cards, as tools/make_presets_page.py
writes them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location(
    "make_presets_page", ROOT / "tools" / "make_presets_page.py"
)
make_presets_page = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(make_presets_page)


def test_the_page_matches_the_cards():
    page = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    assert page == make_presets_page.render(), "run python tools/make_presets_page.py"


def test_every_preset_has_a_row_and_its_card(tmp_path):
    for name in ("alpha", "beta"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(
            f"# {name}\n\nThe {name} model. More.\n\n| | |\n|---|---|\n"
            f"| Class | `CausalLM` |\n| Parameters | 1,024 |\n| Weights | none |\n\n"
            "## Usage\n\n```python\n# a comment, not a heading\n```\n"
        )
    (tmp_path / "not_a_preset").mkdir()
    page = make_presets_page.render(tmp_path)
    assert "| [alpha](#alpha) | `CausalLM` | 1,024 | none | The alpha model |" in page
    assert page.count("\n## alpha\n") == 1 and page.count("\n### Usage\n") == 2
    assert "\n# a comment, not a heading\n" in page  # code blocks untouched
    assert "not_a_preset" not in page
