"""The API reference site builds with warnings as errors and documents every
public name of every subpackage."""

import doctest
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SUBPACKAGES = [
    "layers",
    "models",
    "generation",
    "chat",
    "training",
    "data",
    "datasets",
    "convert",
    "export",
    "tokenizers",
    "zoo",
    "distribute",
    "saving",
    "baselines",
    "serving",
]
pytestmark = [
    pytest.mark.skipif(
        not (REPO / "mkdocs.yml").is_file(), reason="not a source checkout"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("mkdocstrings_handlers") is None,
        reason='the docs extra is not installed: pip install -e ".[docs]"',
    ),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", site_dir],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return site_dir


def public_names(module):
    """`__all__`, or else the classes and functions the module defines."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    prefix = module.__name__
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__.startswith(prefix)
    ]


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_every_public_name_has_an_entry(site, subpackage):
    module = importlib.import_module(f"keras_tfm.{subpackage}")
    page = (site / "api" / subpackage / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(keras_tfm\.[\w.]+)"', page))
    missing = []
    for name in public_names(module):
        value = getattr(module, name)
        if not getattr(value, "__module__", "keras_tfm.").startswith("keras_tfm."):
            # Re-exported from another library (keras-hub's Perplexity):
            # the page names it, the other page has it.
            if name not in page:
                missing.append(name)
            continue
        path = f"keras_tfm.{subpackage}"
        if f"{path}.{name}" not in anchors and not any(
            re.fullmatch(rf"{re.escape(path)}(\.\w+)+\.{name}", a) for a in anchors
        ):
            missing.append(name)
    assert not missing, f"add {missing} to docs/api/{subpackage}.md"


def test_google_sections_render(site):
    page = (site / "api" / "training" / "index.html").read_text(encoding="utf-8")
    start = page.index('id="keras_tfm.training.training_flops_per_token"')
    end = page.find('<h2 id="', start + 10)  # the next entry, if any
    entry = page[start : end if end > 0 else None]
    for section in ("Parameters:", "Returns:", "Examples:"):
        assert section in entry
    assert "<code>num_parameters</code>" in entry
    # The Type column shows the type of each argument (from its name here).
    cells = r"<code>(\w+)</code>\s*</td>\s*<td>\s*<code>([^<]+)</code>"
    types = re.findall(cells, entry)
    assert dict(types)["num_parameters"] == "int"
    # A documented name in backticks links to its entry.
    link = 'href="#keras_tfm.training.train_language_model"><code>train_language_model'
    assert link in page
    # Doctest lines are highlighted code, not nested Markdown quotes.
    for html in (site / "api").rglob("*.html"):
        assert "<blockquote>" not in html.read_text(encoding="utf-8"), html


def test_the_docstring_rewriter():
    spec = importlib.util.spec_from_file_location(
        "griffe_docstrings", REPO / "tools" / "griffe_docstrings.py"
    )
    rewriter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rewriter)
    assert doctest.testmod(rewriter).failed == 0
    text = "Call arguments:\n    inputs: (batch, seq).\n        More.\n"
    assert rewriter.rewrite(text) == (
        "Call arguments:\n    - `inputs`: (batch, seq).\n        More.\n"
    )
    # Indented examples are left as they are.
    assert rewriter.rewrite("Examples:\n    >>> 1\n    1") == (
        "Examples:\n    >>> 1\n    1"
    )
