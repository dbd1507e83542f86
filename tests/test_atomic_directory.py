"""Exports never lose what a folder held: refused unless `overwrite=True`,
and a failure midway leaves the old folder byte for byte."""

import errno
import importlib
import os
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tfm import convert, saving, zoo
from keras_tfm.convert import bert, gpt2, llama
from keras_tfm.models import EncoderBackbone
from tests.convert.decoder_checks import FIXTURES

BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]
CARD = ("A test preset.", "Tests.", "None.", "pytest")
# The module (`keras_tfm.zoo.save_preset` is the function it defines).
save_preset_module = importlib.import_module("keras_tfm.zoo.save_preset")


def snapshot(directory):
    """Every file under `directory` (relative path -> bytes), and the folders."""
    directory = Path(directory)
    return {
        str(path.relative_to(directory)): path.read_bytes() if path.is_file() else None
        for path in sorted(directory.rglob("*"))
    }


def users_folder(parent):
    """A folder holding a user's own files, one of them a config.json."""
    folder = parent / "mine"
    (folder / "notes").mkdir(parents=True)
    (folder / "config.json").write_text('{"mine": true}\n')
    (folder / "notes" / "todo.txt").write_bytes(b"\x00\x01 my notes\n")
    return folder


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def bert_backbone():
    return EncoderBackbone(
        vocabulary_size=len(BERT_VOCAB), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip


# name -> (save(directory, overwrite), the module attribute writing the weights)
EXPORTS = {
    "save_hf_gpt2": (
        lambda d, **kw: convert.save_hf_gpt2(
            convert.load_hf_gpt2(FIXTURES / "tiny_gpt2_hf"), d, **kw
        ),
        (gpt2, "write_safetensors"),
    ),
    "save_hf_llama": (
        lambda d, **kw: convert.save_hf_llama(
            convert.load_hf_llama(FIXTURES / "tiny_llama_tied_hf"), d, **kw
        ),
        (llama, "write_safetensors"),
    ),
    "save_hf_bert": (
        lambda d, **kw: convert.save_hf_bert(
            bert_backbone(), convert.HFBertTokenizer(BERT_VOCAB), d, **kw
        ),
        (bert, "write_safetensors"),
    ),
    "save_preset": (
        lambda d, **kw: zoo.save_preset(zoo.from_preset("gpt_nano"), d, *CARD, **kw),
        (save_preset_module, "atomic_save"),
    ),
}


@pytest.mark.parametrize("name", EXPORTS)
def test_a_failure_midway_leaves_the_folder_byte_identical(name, tmp_path, monkeypatch):
    save, (module, writer) = EXPORTS[name]
    folder = users_folder(tmp_path)
    before = snapshot(tmp_path)
    # The weights fail to write (a full disk) after config.json was written.
    monkeypatch.setattr(module, writer, full_disk)
    with pytest.raises(OSError, match="No space left"):
        save(folder, overwrite=True)
    assert snapshot(tmp_path) == before  # nor any temporary folder left beside


@pytest.mark.parametrize("name", EXPORTS)
def test_a_folder_with_files_is_refused_without_overwrite(name, tmp_path):
    save, _ = EXPORTS[name]
    folder = users_folder(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="not empty; pass overwrite=True") as info:
        save(folder)
    assert f"Received: directory={str(folder)!r}" in str(info.value)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name", EXPORTS)
def test_overwrite_replaces_the_folder(name, tmp_path):
    save, _ = EXPORTS[name]
    folder = users_folder(tmp_path)
    keras.utils.set_random_seed(0)  # the same random weights, where random
    fresh = save(tmp_path / "elsewhere" / "mine")  # a preset's card holds its name
    keras.utils.set_random_seed(0)
    assert save(folder, overwrite=True) == folder
    # The user's files are gone; the export's are all there. (A preset's
    # config may hold auto-numbered layer names, so only the names compare.)
    assert sorted(snapshot(folder)) == sorted(snapshot(fresh))
    if name != "save_preset":
        assert snapshot(folder) == snapshot(fresh)
    assert "mine" not in (folder / "config.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "mine"]


def test_an_empty_folder_is_written_without_overwrite(tmp_path):
    (tmp_path / "empty").mkdir()
    with saving.atomic_directory(tmp_path / "empty") as tmp:
        (tmp / "a.txt").write_text("a")
    assert snapshot(tmp_path) == {"empty": None, "empty/a.txt": b"a"}


def test_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="it is a file"):
        with saving.atomic_directory(tmp_path / "f", overwrite=True):
            pass
    assert (tmp_path / "f").read_text() == "x"


def test_an_interrupt_inside_the_block_leaves_the_folder(tmp_path):
    folder = users_folder(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with saving.atomic_directory(folder, overwrite=True) as tmp:
            (tmp / "config.json").write_text("{}")
            raise KeyboardInterrupt
    assert snapshot(tmp_path) == before


def test_the_new_folder_gets_the_usual_permissions(tmp_path):
    with saving.atomic_directory(tmp_path / "out") as tmp:
        (tmp / "a").write_text("a")
    reference = tmp_path / "reference"
    reference.mkdir()  # what mkdir gives under this process's umask
    assert (tmp_path / "out").stat().st_mode == reference.stat().st_mode


def test_a_failed_rename_puts_the_old_folder_back(tmp_path, monkeypatch):
    folder = users_folder(tmp_path)
    before = snapshot(tmp_path)
    real_replace = os.replace

    def replace(source, target):
        if Path(source).name.startswith(".mine.tmp-"):
            raise OSError(errno.EXDEV, "simulated")
        return real_replace(source, target)

    monkeypatch.setattr(saving.os, "replace", replace)
    with pytest.raises(OSError, match="simulated"):
        with saving.atomic_directory(folder, overwrite=True) as tmp:
            (tmp / "x").write_bytes(np.arange(3).tobytes())
    assert snapshot(tmp_path) == before


def test_a_relative_path_is_written_beside_and_the_working_folder_refused(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with saving.atomic_directory("out") as tmp:
        assert tmp.parent == tmp_path
        (tmp / "a").write_text("a")
    assert (tmp_path / "out" / "a").read_text() == "a"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for directory in (".", "..", str(tmp_path)):
        with pytest.raises(ValueError, match="holds the current working directory"):
            with saving.atomic_directory(directory, overwrite=True):
                pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "sub"]
