"""What the three families share: one argument check, one config, one set of options.

Every family takes the same shared arguments (`models/_common.py`) with the
same rules, so each check here runs against all three.
"""

import keras
import numpy as np
import pytest

from keras_tfm.models import CausalLM, EncoderBackbone, Seq2SeqLM
from keras_tfm.models._common import POSITION_ENCODINGS, SHARED_ARGUMENTS
from tests.builders import causal_lm, seq2seq_lm

VOCAB = 23


def small(cls, **overrides):
    arguments = dict(
        vocabulary_size=VOCAB,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=12,
    )
    if cls is Seq2SeqLM:
        arguments.update(num_encoder_layers=1, num_decoder_layers=1)
    else:
        arguments.update(num_layers=1)
    arguments.update(overrides)
    builder = {CausalLM: causal_lm, Seq2SeqLM: seq2seq_lm}.get(cls, cls)
    return builder(**arguments)


def forward(model, ids):
    if isinstance(model, Seq2SeqLM):
        return np.asarray(model({"source_ids": ids, "target_ids": ids}))
    return np.asarray(model(ids))


FAMILIES = [CausalLM, EncoderBackbone, Seq2SeqLM]


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("padding_id", [-1, VOCAB, True, 1.0, "0"])
def test_every_family_refuses_the_same_bad_padding_ids(cls, padding_id):
    with pytest.raises(ValueError, match=r"padding_id.*Received: padding_id="):
        small(cls, padding_id=padding_id)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
def test_every_family_accepts_padding_id_none_and_then_attends_to_every_id(cls):
    ids = np.array([[3, 4, 0, 5, 6]])
    changed = ids.copy()
    changed[0, 2] = 7
    model = small(cls, padding_id=None)
    # With no padding id, token 0 is a real token: changing it changes the
    # output at the positions after it (every position for the encoder).
    assert not np.allclose(forward(model, ids)[0, 3:], forward(model, changed)[0, 3:])
    padded = small(cls, padding_id=0)
    padded.set_weights(model.get_weights())
    zeroed = ids.copy()
    zeroed[0, 2] = 0
    # With padding_id=0 the zero is masked: what sits there cannot matter,
    # but the real tokens' outputs differ from the unmasked model's.
    assert not np.allclose(
        forward(padded, zeroed)[0, 3:], forward(model, zeroed)[0, 3:]
    )


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(vocabulary_size=0), "vocabulary_size"),
        (dict(num_heads=3), "divisible by `num_heads`"),
        (dict(num_key_value_heads=3, num_heads=2), "multiple of `num_key_value_heads`"),
        (dict(activation="tanh"), "activation"),
        (dict(normalization="batch_norm"), "normalization"),
        (dict(dropout=1.0), "dropout"),
        (dict(layer_norm_epsilon=0), "layer_norm_epsilon"),
        (dict(position_encoding="alibi"), "position_encoding"),
        (dict(rotary_max_wavelength=-1), "rotary_max_wavelength"),
        (dict(head_dim=0), "head_dim"),
    ],
)
def test_every_family_checks_the_shared_arguments_alike(cls, overrides, message):
    with pytest.raises(ValueError, match=message):
        small(cls, **overrides)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("position_encoding", POSITION_ENCODINGS)
def test_every_family_takes_every_position_encoding(cls, position_encoding):
    model = small(cls, position_encoding=position_encoding)
    ids = np.array([[1, 2, 3, 4]])
    out = forward(model, ids)
    assert np.all(np.isfinite(out))
    if position_encoding == "rotary":
        attribute = (
            "decoder_position_embedding"
            if cls is Seq2SeqLM
            else "position_embedding"
        )
        assert getattr(getattr(model, "backbone", model), attribute) is None


def non_default(cls):
    return dict(
        head_dim=6,
        num_key_value_heads=1,
        activation="swiglu",
        dropout=0.1,
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=1e-6,
        position_encoding="rotary",
        rotary_max_wavelength=100000,
        use_bias=False,
        padding_id=None,
        **({} if cls is EncoderBackbone else {"tie_word_embeddings": False}),
    )


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
def test_get_config_lists_every_shared_argument_and_round_trips(cls):
    arguments = non_default(cls)
    model = small(cls, **arguments)
    config = model.get_config()
    backbone_config = getattr(model, "backbone", model).get_config()
    assert set(SHARED_ARGUMENTS) <= set(backbone_config)
    for name, value in arguments.items():
        assert {**backbone_config, **config}[name] == value, name
    clone = cls.from_config(config)
    assert clone.get_config() == config
    clone.set_weights(model.get_weights())
    ids = np.array([[1, 2, 3, 4, 5]])
    np.testing.assert_allclose(forward(clone, ids), forward(model, ids), atol=1e-6)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
def test_the_options_reach_every_block(cls):
    model = small(cls, **non_default(cls))
    backbone = getattr(model, "backbone", model)
    blocks = (
        backbone.encoder_transformer_layers + backbone.decoder_transformer_layers
        if cls is Seq2SeqLM
        else backbone.transformer_layers
    )
    for block in blocks:
        attention = block.self_attention
        assert attention.effective_head_dim == 6
        assert attention.effective_num_key_value_heads == 1
        assert attention.rotary_embedding.max_wavelength == 100000
        # No projection has a bias: only kernels (and norm scales) remain.
        names = [w.path for w in block.weights]
        assert not [n for n in names if n.endswith("bias")], names
        # (hidden 8) -> 2 query heads of 6; 1 key/value head of 6, fused.
        assert tuple(attention.query_dense.kernel.shape) == (8, 12)
        assert tuple(attention.key_value_dense.kernel.shape) == (8, 12)


@pytest.mark.parametrize(
    "cls", [CausalLM, Seq2SeqLM], ids=lambda c: c.__name__
)
def test_an_untied_head_is_a_separate_bias_free_float32_dense(cls):
    model = small(cls, tie_word_embeddings=False, dtype="mixed_bfloat16")
    assert model.lm_head.kernel.shape == (8, VOCAB)
    assert model.lm_head.bias is None
    logits = forward(model, np.array([[1, 2, 3]]))
    assert logits.dtype == np.float32
    tied = small(cls)
    assert tied.lm_head is None
    assert len(model.weights) == len(tied.weights) + 1


def test_the_untied_head_computes_hidden_times_kernel():
    model = small(CausalLM, tie_word_embeddings=False, normalize_first=False)
    ids = np.array([[1, 2, 3]])
    backbone = model.backbone
    hidden = backbone.embed(ids)
    for block in backbone.transformer_layers:
        hidden = block(hidden, padding_mask=backbone.padding_mask_of(ids))
    # Reference: a float64 NumPy product with the head's kernel.
    expected = np.asarray(hidden, "float64") @ np.asarray(
        model.lm_head.kernel, "float64"
    )
    np.testing.assert_allclose(np.asarray(model(ids)), expected, atol=1e-5)
    # And it is not the token embedding: the tied projection differs.
    embedding = np.asarray(backbone.token_embedding.embeddings, "float64")
    assert not np.allclose(np.asarray(hidden, "float64") @ embedding.T, expected)


def llama_like(cls, **overrides):
    return small(
        cls,
        hidden_dim=16,
        num_heads=4,
        num_key_value_heads=2,
        activation="swiglu",
        normalization="rms_norm",
        position_encoding="rotary",
        rotary_max_wavelength=100000,
        use_bias=False,
        tie_word_embeddings=False,
        **overrides,
    )


@pytest.mark.parametrize("padding_id", [0, None])
def test_causal_lm_cache_equals_the_full_pass_untied_gqa_no_bias(padding_id):
    model = llama_like(CausalLM, padding_id=padding_id)
    ids = np.array([[3, 9, 4, 11, 7, 5], [8, 2, 6, 1, 12, 4]])
    full = np.asarray(model(ids))
    cache = model.empty_cache(2, ids.shape[1])
    steps = []
    for t in range(ids.shape[1]):
        logits, cache = model.call_with_cache(ids[:, t : t + 1], cache, t)
        steps.append(np.asarray(logits)[:, 0])
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=1e-5)


def test_seq2seq_cache_equals_the_full_pass_untied_gqa_no_bias():
    model = llama_like(Seq2SeqLM, padding_id=None)
    source = np.array([[3, 9, 4, 11, 7], [8, 2, 6, 1, 12]])
    target = np.array([[1, 5, 6, 7], [1, 9, 3, 2]])
    full = np.asarray(model({"source_ids": source, "target_ids": target}))
    encoded = model.backbone.encode(source)
    cross = model.compute_cross_attention_cache(encoded)
    cache = model.empty_cache(2, target.shape[1])
    steps = []
    for t in range(target.shape[1]):
        logits, cache = model.call_with_cache(target[:, t : t + 1], cache, t, cross)
        steps.append(np.asarray(logits)[:, 0])
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=1e-5)


def greedy_reference(step, start, count):
    """Greedy decoding by full uncached passes on the unpadded sequence."""
    tokens = list(start)
    for _ in range(count):
        tokens.append(int(np.argmax(step(np.array([tokens]))[0, -1])))
    return tokens


def test_causal_lm_generates_without_a_padding_id_as_full_passes_do():
    model = llama_like(CausalLM, padding_id=None, max_sequence_length=16)
    prompts = [[0, 4, 5], [7, 0, 3, 3, 9, 1]]
    together = model.generate(prompts, max_new_tokens=5)
    expected = [
        greedy_reference(lambda ids: np.asarray(model(ids)), p, 5) for p in prompts
    ]
    assert together == expected


def test_seq2seq_generates_without_a_padding_id_as_full_passes_do():
    # The sources are padded to a common length inside `generate`; with no
    # padding id, only their lengths say what to mask.
    model = llama_like(
        Seq2SeqLM, padding_id=None, max_sequence_length=16, start_token_id=1
    )
    sources = [[0, 4, 5], [7, 0, 3, 3, 9, 1, 2, 2, 6, 5]]
    together = model.generate(sources, max_new_tokens=5)

    def reference(source):
        def step(target):
            inputs = {"source_ids": np.array([source]), "target_ids": target}
            return np.asarray(model(inputs))

        return greedy_reference(step, [1], 5)[1:]

    assert together == [reference(source) for source in sources]
    beams = model.generate(sources, max_new_tokens=4, num_beams=2)
    assert [len(row) for row in beams] == [4, 4]


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.__name__)
def test_a_saved_model_with_every_option_reloads(cls, tmp_path):
    model = small(cls, **non_default(cls))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(forward(loaded, ids), forward(model, ids))
