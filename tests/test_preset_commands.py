"""Every command line `keras-tfm presets` prints runs as printed (with small
limits: tests/preset_commands.py), in this process.

`chat`'s line runs on a one-layer Llama with SmolLM2's tokenizer and template
(tests/tiny_chat.py) given for `smollm2_135m_instruct`: SmolLM2's own chat
loop costs ~20 CPU-s to compile for the same command path, and loading the
preset by its name is tests/zoo/test_installed_checkpoints.py's (the
session's `smollm2` fixture). The other presets load by name, as printed.
"""

import pytest

from keras_tfm import launcher
from tests import preset_commands, tiny_chat


@pytest.mark.slow  # every printed command in turn
def test_every_command_that_presets_prints_runs(tmp_path, capsys, monkeypatch, smollm2):
    from keras_tfm import zoo

    chat_model = tiny_chat.tiny_chat_model(smollm2.preprocessor.tokenizer)
    load, asked = zoo.from_preset, []

    def from_preset(name, **kwargs):
        asked.append(name)
        return chat_model if name == "smollm2_135m_instruct" else load(name, **kwargs)

    monkeypatch.setattr(zoo, "from_preset", from_preset)
    monkeypatch.setattr("keras_tfm.zoo.named_model.from_preset", from_preset)
    # `quiet()` sets the environment of a fresh process: not this one's.
    monkeypatch.setattr(launcher, "quiet", lambda: None)
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", "off")
    failed = preset_commands.run_all(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert failed == 0, "\n".join(line for line in lines if line.startswith("failed"))
    ran = [line for line in lines if line.startswith("ok keras-tfm")]
    # Each kind of command ran: a training, generation, translation, chat, classify.
    for words in ("train --preset gpt_tiny", "generate kjv_gpt", "translator_de_en",
                  "translator_es_en", "chat", "classify"):  # fmt: skip
        assert any(words in line for line in ran), (words, lines)
    assert "smollm2_135m_instruct" in asked  # the chat line asked for its preset
