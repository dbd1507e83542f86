import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from gguf.quants import quantize

from keras_tfm.convert import gguf_llama, gguf_reader
from tests.convert.tiny_gguf import Q, write_tiny_llama


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_llama(path)
    return path


def test_dequantized_values_are_the_quantised_ones_within_the_block_error():
    # One scale (and for Q4_1 a minimum) per block of 32 values: the error is
    # at most one quantisation step, (max - min) / (2^bits - 1), per block.
    rng = np.random.default_rng(0)
    values = rng.standard_normal((4, 64)).astype("float32")
    for kind, bits in ((Q.Q8_0, 8), (Q.Q4_1, 4)):
        # The fields of a gguf.ReaderTensor that dequantize reads.
        tensor = SimpleNamespace(
            name="w",
            tensor_type=kind,
            shape=np.array([64, 4]),
            data=quantize(values, kind),
        )
        out = gguf_reader.dequantize(tensor, (4, 64))
        assert out.dtype == np.float32 and out.shape == (4, 64)
        blocks = values.reshape(4, 2, 32)
        step = (blocks.max(-1) - blocks.min(-1)) / (2**bits - 1)
        error = np.abs(out - values).reshape(4, 2, 32).max(-1)
        assert np.all(error <= step * 1.01 + 1e-6)


def test_tiny_file_round_trips_its_tensors(tiny_path):
    reader = gguf_reader.open_gguf(tiny_path)
    assert gguf_reader.metadata(reader, "llama.block_count") == 2
    table = gguf_reader.tensor_table(reader)
    assert table["blk.0.attn_q.weight"].tensor_type.name == "Q4_1"
    assert table["token_embd.weight"].tensor_type.name == "Q8_0"


def test_a_file_is_parsed_once_per_version(tiny_path, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_path.read_bytes())
    reader = gguf_reader.open_gguf(copy)
    assert gguf_reader.open_gguf(str(copy)) is reader
    # A rewritten file is read again: its new tensor values, not the old map.
    data = bytearray(copy.read_bytes())
    tensor = gguf_reader.tensor_table(reader)["output_norm.weight"]
    start = tensor.data_offset
    data[start : start + 4] = np.float32(123.0).tobytes()
    copy.write_bytes(bytes(data))
    os.utime(copy, ns=(0, 10**18))
    again = gguf_reader.open_gguf(copy)
    assert again is not reader
    values = gguf_reader.tensor_table(again)["output_norm.weight"].data
    assert values.reshape(-1)[0] == 123.0


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 this is a zip, not GGUF")
    with pytest.raises(ValueError, match=r"Not a GGUF file: it starts with b'PK"):
        gguf_reader.open_gguf(path)
    with pytest.raises(ValueError, match="must be an existing file"):
        gguf_reader.open_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.99])
def test_truncated_file(tiny_path, tmp_path, keep):
    data = tiny_path.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="truncated"):
        gguf_reader.open_gguf(path)


def test_unsupported_quantisation_type_is_named(tmp_path):
    path = tmp_path / "iq.gguf"
    # One IQ2_XXS block: 256 values in 66 bytes.
    write_tiny_llama(path, extra={"odd": (np.zeros((1, 66), np.uint8), Q.IQ2_XXS)})
    tensor = gguf_reader.tensor_table(gguf_reader.open_gguf(path))["odd"]
    with pytest.raises(ValueError, match=r"'odd' is quantised as IQ2_XXS.*Q4_1"):
        gguf_reader.dequantize(tensor, (1, 256))


def test_unsupported_quantisation_in_a_model_file_names_the_tensor(tmp_path):
    path = tmp_path / "mxfp4.gguf"
    write_tiny_llama(path, linear_type=Q.MXFP4)
    reader = gguf_reader.open_gguf(path)
    with pytest.raises(ValueError, match="'blk.0.attn_q.weight' is quantised as MXFP4"):
        gguf_llama.gguf_tensors(reader, gguf_llama.convert_gguf_backbone_config(reader))


def test_unsupported_architecture(tmp_path):
    path = tmp_path / "gpt2.gguf"
    write_tiny_llama(path, architecture="gpt2")
    with pytest.raises(ValueError, match="general.architecture='gpt2'"):
        gguf_llama.convert_gguf_backbone_config(gguf_reader.open_gguf(path))


def test_missing_tensor_and_wrong_shape_are_named(tmp_path):
    path = tmp_path / "missing.gguf"
    write_tiny_llama(path, skip_tensor="blk.1.ffn_up.weight")
    reader = gguf_reader.open_gguf(path)
    config = gguf_llama.convert_gguf_backbone_config(reader)
    with pytest.raises(ValueError, match="no tensor 'blk.1.ffn_up.weight'"):
        gguf_llama.gguf_tensors(reader, config)
    path = tmp_path / "shape.gguf"
    write_tiny_llama(path, linear_type=Q.F32, bad_shape_tensor="blk.0.attn_v.weight")
    reader = gguf_reader.open_gguf(path)
    with pytest.raises(ValueError, match=r"'blk.0.attn_v.weight' has shape \(16, 64\)"):
        gguf_llama.gguf_tensors(reader, config)


def test_missing_metadata_key(tiny_path):
    reader = gguf_reader.open_gguf(tiny_path)
    with pytest.raises(ValueError, match="no metadata key 'llama.nonexistent'"):
        gguf_reader.metadata(reader, "llama.nonexistent")
    assert gguf_reader.metadata(reader, "llama.nonexistent", 7, False) == 7


def test_absent_gguf_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ValueError, match="pip install gguf"):
        gguf_reader.import_gguf()


def test_a_tensor_with_no_llama_place_is_named(tmp_path):
    # e.g. Llama 3.1's rope_freqs (RoPE scaling, not supported).
    path = tmp_path / "rope.gguf"
    extra = {"rope_freqs.weight": (np.ones(4, np.float32), Q.F32)}
    write_tiny_llama(path, linear_type=Q.F32, extra=extra)
    reader = gguf_reader.open_gguf(path)
    with pytest.raises(ValueError, match="GGUF tensor 'rope_freqs.weight'"):
        gguf_llama.gguf_tensors(reader, gguf_llama.convert_gguf_backbone_config(reader))
    # A layer beyond llama.block_count (2) has a name but no place.
    path = tmp_path / "layer.gguf"
    extra = {"blk.2.attn_norm.weight": (np.ones(32, np.float32), Q.F32)}
    write_tiny_llama(path, linear_type=Q.F32, extra=extra)
    reader = gguf_reader.open_gguf(path)
    with pytest.raises(ValueError, match=r"no place for: \['blk.2.attn_norm"):
        gguf_llama.gguf_tensors(reader, gguf_llama.convert_gguf_backbone_config(reader))


def test_rope_scaling_is_refused(tmp_path):
    path = tmp_path / "yarn.gguf"
    write_tiny_llama(path, rope_scaling="yarn")
    with pytest.raises(ValueError, match="llama.rope.scaling.type='yarn'"):
        gguf_llama.convert_gguf_backbone_config(gguf_reader.open_gguf(path))
