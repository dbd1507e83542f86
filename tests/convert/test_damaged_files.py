"""A damaged checkpoint file is named, with what is wrong and what to do."""

import json
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from keras_tfm import convert
from tests.convert.decoder_checks import FIXTURES

LOADERS = {
    "gpt2": convert.load_hf_gpt2,
    "llama_gqa": convert.load_hf_llama,
    "bert": convert.load_hf_bert,
    "marian": convert.load_hf_marian,
}


def copy_of(name, tmp_path):
    target = tmp_path / name
    shutil.copytree(FIXTURES / f"tiny_{name}_hf", target)
    return target


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return len(data) // 2


@pytest.mark.parametrize("name", LOADERS)
def test_a_safetensors_file_cut_in_half_is_named(name, tmp_path):
    folder = copy_of(name, tmp_path)
    size = cut_in_half(folder / "model.safetensors")
    with pytest.raises(ValueError) as info:
        LOADERS[name](folder)
    message = str(info.value)
    assert message.startswith(f"{folder / 'model.safetensors'} is truncated or corrupt")
    assert "Download or copy it again" in message
    assert f"Received: a file of {size} bytes" in message


def test_a_cut_shard_is_named(tmp_path):
    folder = copy_of("llama_gqa", tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    shards = {"a.safetensors": names[: len(names) // 2],
              "b.safetensors": names[len(names) // 2 :]}  # fmt: skip
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / shard))
    (folder / "model.safetensors").unlink()
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": weight_map})
    )
    # The whole shards load to the same model as the single file.
    whole = convert.load_hf_llama(FIXTURES / "tiny_llama_gqa_hf")
    sharded = convert.load_hf_llama(folder)
    ids = np.array([[5, 6, 7, 8]])
    np.testing.assert_array_equal(np.asarray(whole(ids)), np.asarray(sharded(ids)))
    cut_in_half(folder / "b.safetensors")
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'b.safetensors'} is")):
        convert.load_hf_llama(folder)


@pytest.mark.parametrize("name", LOADERS)
def test_a_config_that_is_not_json_is_named(name, tmp_path):
    folder = copy_of(name, tmp_path)
    (folder / "config.json").write_text('{"vocab_size": 320,\n  "n_layer": 2,,}')
    with pytest.raises(ValueError) as info:
        LOADERS[name](folder)
    message = str(info.value)
    assert message.startswith(f"{folder / 'config.json'} is not valid JSON (")
    assert "line 2" in message  # where the JSON breaks


def test_a_tokenizer_json_that_is_not_json_is_named(tmp_path):
    folder = copy_of("llama_gqa", tmp_path)
    cut_in_half(folder / "tokenizer.json")
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'tokenizer.json'} is")):
        convert.load_hf_llama(folder)
