"""Structured pruning: importance against float64 NumPy, and the pruned model
against the original with the same heads' and units' outputs zeroed."""

import doctest

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.models import EncoderBackbone, EncoderClassifier
from keras_tfm.training import pruning
from tests.conftest import requires_debian_package
from tests.layers import numpy_reference as ref
from tests.layers.test_multi_head_self_attention import reference_weights

HEADS, HEAD_DIM, UNITS, LAYERS = 4, 2, 6, 2
IDS = np.array([[2, 5, 7, 9, 0, 0], [3, 4, 11, 12, 13, 8], [6, 1, 0, 0, 0, 0]])
LABELS = np.array([0, 2, 1])


def tiny_classifier(seed=0, **backbone_overrides):
    keras.utils.set_random_seed(seed)
    config = dict(vocabulary_size=20, num_layers=LAYERS, num_heads=HEADS,
                  hidden_dim=HEADS * HEAD_DIM, intermediate_dim=UNITS,
                  max_sequence_length=6, num_segments=0)  # fmt: skip
    backbone = EncoderBackbone(**dict(config, **backbone_overrides))
    model = EncoderClassifier(backbone, 3, pooling="mean")
    # Larger weights than BERT's N(0, 0.02), so that every head matters.
    model.set_weights([w if w.ndim < 2 else
                       np.random.default_rng(1).normal(0, 0.5, w.shape)
                       for w in model.get_weights()])  # fmt: skip
    return model


def _f64(variable):
    return np.asarray(variable, np.float64)


def numpy_loss(model, head_gates, unit_gates, ids=IDS, labels=LABELS):
    """Float64 forward pass of the (post-LN, mean-pooled) classifier with a
    gate on every head's and unit's output, and its mean cross-entropy."""
    backbone = model.backbone
    eps = backbone.layer_norm_epsilon
    mask = ids != 0
    length = ids.shape[1]
    self_mask = np.broadcast_to(mask[:, None, :], (len(ids), length, length))

    def layer_norm(layer):
        return lambda x: ref.layer_norm(x, _f64(layer.gamma), _f64(layer.beta), eps)

    x = _f64(backbone.token_embedding.embeddings)[ids]
    x = x + _f64(backbone.position_embedding.embeddings)[: ids.shape[1]]
    x = layer_norm(backbone.embeddings_layer_norm)(x)
    for block, heads, units in zip(backbone.transformer_layers, head_gates,
                                   unit_gates, strict=True):  # fmt: skip
        attention = block.self_attention
        weights = reference_weights(attention)
        weights["wo"] = weights["wo"] * np.repeat(heads, HEAD_DIM)[:, None]
        n = attention.num_heads
        x = ref.residual(
            x,
            lambda h, w=weights, n=n: ref.attention(h, h, w, n, n, HEAD_DIM,
                                                    mask=self_mask)[0],
            layer_norm(block.self_attention_norm),
            False,
        )  # fmt: skip
        ffn = block.feed_forward
        x = ref.residual(
            x,
            lambda h, ffn=ffn, units=units: ref.feed_forward(
                h, _f64(ffn.intermediate_dense.kernel),
                _f64(ffn.intermediate_dense.bias),
                _f64(ffn.output_dense.kernel) * units[:, None],
                _f64(ffn.output_dense.bias), "gelu"),
            layer_norm(block.feed_forward_norm),
            False,
        )  # fmt: skip
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    logits = pooled @ _f64(model.classifier.kernel) + _f64(model.classifier.bias)
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -log_p[np.arange(len(labels)), labels].mean()


def gate_derivatives(model, kind, ids=IDS, labels=LABELS, step=1e-5):
    """|dL/dxi| of every head or unit by central differences in float64."""
    heads = [np.ones(HEADS) for _ in range(LAYERS)]
    units = [np.ones(UNITS) for _ in range(LAYERS)]
    gates = heads if kind == "heads" else units
    result = []
    for layer in range(LAYERS):
        row = []
        for unit in range(len(gates[layer])):
            values = []
            for sign in (1, -1):
                gates[layer][unit] = 1 + sign * step
                values.append(numpy_loss(model, heads, units, ids, labels))
            gates[layer][unit] = 1.0
            row.append(abs(values[0] - values[1]) / (2 * step))
        result.append(np.array(row))
    return result


@pytest.fixture(scope="module")
def model():
    return tiny_classifier()


def test_the_numpy_forward_pass_is_the_models(model):
    # The reference is only a reference if, ungated, it is the model.
    logits = model(IDS, training=False)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(LABELS, logits)
    ones = [np.ones(HEADS)] * LAYERS, [np.ones(UNITS)] * LAYERS
    assert float(loss) == pytest.approx(numpy_loss(model, *ones), rel=1e-5)


def test_gradient_importance_is_the_derivative_by_each_gate(model):
    batch = [(IDS, LABELS)]
    heads = pruning.head_importance(model, batch)
    units = pruning.ffn_importance(model, batch)
    expected = gate_derivatives(model, "heads") + gate_derivatives(model, "units")
    for got, want in zip(heads + units, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    assert min(h.max() for h in heads) > 1e-3  # the test has teeth


def test_importance_over_batches_is_the_mean_of_their_magnitudes(model):
    # Michel et al.'s expectation of |dL/dxi| is over examples: one per batch.
    batches = [(IDS[i : i + 1], LABELS[i : i + 1]) for i in range(len(IDS))]
    got = pruning.head_importance(model, batches)
    each = [gate_derivatives(model, "heads", *batch) for batch in batches]
    for layer in range(LAYERS):
        expected = np.mean([e[layer] for e in each], axis=0)
        np.testing.assert_allclose(got[layer], expected, rtol=1e-3, atol=1e-6)
    # Not the magnitude of the mean: the signs of the examples differ.
    whole = pruning.head_importance(model, [(IDS, LABELS)])
    assert not np.allclose(got[0], whole[0], rtol=1e-2)


def test_magnitude_importance_is_the_norm_of_the_owned_weights(model):
    block = model.backbone.transformer_layers[1]
    w = reference_weights(block.self_attention)
    width = HEADS * HEAD_DIM
    head = slice(2 * HEAD_DIM, 3 * HEAD_DIM)  # head 2
    owned = np.concatenate([
        w["wq"][:, head].ravel(), w["wkv"][:, head].ravel(),
        w["wkv"][:, width:][:, head].ravel(), w["wo"][head].ravel()])  # fmt: skip
    scores = pruning.head_importance(model, method="magnitude")
    assert scores[1][2] == pytest.approx(np.linalg.norm(owned), rel=1e-6)
    ffn = block.feed_forward
    owned = np.concatenate([_f64(ffn.intermediate_dense.kernel)[:, 4],
                            [_f64(ffn.intermediate_dense.bias)[4]],
                            _f64(ffn.output_dense.kernel)[4]])  # fmt: skip
    units = pruning.ffn_importance(model, method="magnitude")
    assert units[1][4] == pytest.approx(np.linalg.norm(owned), rel=1e-6)


def zeroed(model, heads=None, units=None):
    """A copy of `model` with the given heads' and units' outputs set to zero
    (their rows of the output projections zeroed)."""
    copy = tiny_classifier()
    copy.set_weights(model.get_weights())
    for layer, block in enumerate(copy.backbone.transformer_layers):
        kernel = keras.ops.convert_to_numpy(block.self_attention.output_dense.kernel)
        for h in (heads or {}).get(layer, []):
            kernel[h * HEAD_DIM : (h + 1) * HEAD_DIM] = 0
        block.self_attention.output_dense.kernel.assign(kernel)
        kernel = keras.ops.convert_to_numpy(block.feed_forward.output_dense.kernel)
        kernel[(units or {}).get(layer, [])] = 0
        block.feed_forward.output_dense.kernel.assign(kernel)
    return copy


def test_pruned_heads_equal_the_original_with_those_heads_zeroed(model):
    heads = {0: [0, 2], 1: [3]}
    pruned = pruning.prune_heads(model, heads)
    assert pruned.backbone.num_heads_per_layer == (2, 3)
    assert pruned.count_params() < model.count_params()
    expected = zeroed(model, heads=heads)(IDS)
    np.testing.assert_allclose(pruned(IDS), expected, atol=1e-5)
    # ... and not the unpruned model (the heads did matter).
    assert np.abs(np.asarray(model(IDS)) - np.asarray(expected)).max() > 1e-3


def test_pruned_units_equal_the_original_with_those_units_zeroed(model):
    units = {0: [1, 5], 1: [0, 2, 3]}
    pruned = pruning.prune_ffn(model, units)
    assert pruned.backbone.intermediate_dim_per_layer == (4, 3)
    expected = zeroed(model, units=units)(IDS)
    np.testing.assert_allclose(pruned(IDS), expected, atol=1e-5)
    assert np.abs(np.asarray(model(IDS)) - np.asarray(expected)).max() > 1e-3


def test_pruning_heads_then_units_saves_and_loads(model, tmp_path):
    pruned = pruning.prune_heads(model, {0: [1], 1: [0, 1, 2]})
    pruned = pruning.prune_ffn(pruned, {1: [0]})
    expected = zeroed(model, heads={0: [1], 1: [0, 1, 2]}, units={1: [0]})(IDS)
    np.testing.assert_allclose(pruned(IDS), expected, atol=1e-5)
    path = tmp_path / "pruned.keras"
    pruned.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.backbone.num_heads_per_layer == (3, 1)
    assert loaded.backbone.intermediate_dim_per_layer == (UNITS, UNITS - 1)
    np.testing.assert_allclose(loaded(IDS), pruned(IDS), atol=1e-6)


def test_least_important_ranks_normalized_scores_globally():
    # Layer 1's scores are 10x larger; after normalization they compete fairly.
    scores = [np.array([0.1, 0.8, 0.6]), np.array([3.0, 7.0, 6.5])]
    assert pruning.least_important(scores, 1 / 3) == {0: [0], 1: [0]}
    assert pruning.least_important(scores, 1 / 3, normalize=False) == {0: [0, 2],
                                                                       1: []}
    # Every layer keeps min_keep units, whatever the fraction.
    assert pruning.least_important(scores, 0.99) == {0: [0, 2], 1: [0, 2]}
    assert pruning.least_important(scores, 0) == {0: [], 1: []}


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: pruning.prune_heads(m, {0: [0, 1, 2, 3]}), r"heads\[0\]"),
        (lambda m: pruning.prune_heads(m, {0: [7]}), r"heads\[0\]=\[7\]"),
        (lambda m: pruning.prune_heads(m, {5: [0]}), "layers in"),
        (lambda m: pruning.prune_ffn(m, [1]), "units"),
        (lambda m: pruning.head_importance(m), "dataset=None"),
        (lambda m: pruning.head_importance(m, method="taylor"), "method"),
        (lambda m: pruning.least_important([np.ones(2)], 1.0), "fraction=1.0"),
        (lambda m: pruning.head_importance(m.classifier, method="magnitude"),
         "EncoderBackbone"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused(model, call, message):
    with pytest.raises(ValueError, match=message):
        call(model)


def test_grouped_query_and_quantized_models_are_refused():
    gqa = tiny_classifier(num_key_value_heads=2)
    with pytest.raises(ValueError, match="num_key_value_heads=2"):
        pruning.prune_heads(gqa, {0: [0]})
    quantized = tiny_classifier()
    quantized.quantize("int8")
    with pytest.raises(ValueError, match="quantized"):
        pruning.prune_ffn(quantized, {0: [0]})


def test_per_layer_shapes_are_checked():
    with pytest.raises(ValueError, match=r"num_heads_per_layer=\[2\]"):
        tiny_classifier(num_heads_per_layer=[2])
    with pytest.raises(ValueError, match="intermediate_dim_per_layer=0"):
        tiny_classifier(intermediate_dim_per_layer=[0, 3])
    with pytest.raises(ValueError, match="num_key_value_heads=2"):
        tiny_classifier(num_heads_per_layer=[2, 2], num_key_value_heads=2)
    # An unpruned model's config is as it was: no per-layer keys.
    assert "num_heads_per_layer" not in tiny_classifier().backbone.get_config()


def test_docstring_examples():
    result = doctest.testmod(
        pruning, extraglobs={"np": np, "keras": keras, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0


@requires_debian_package("fortunes")
def test_the_shipped_pruned_preset_is_the_smaller_dense_model_its_card_claims():
    import re

    from keras_tfm import zoo
    from keras_tfm.data.classification import classification_dataset
    from keras_tfm.datasets.fortunes import fortune_splits
    from keras_tfm.training.text_classification import predict_with_labels

    pruned = zoo.from_preset("fortunes_classifier_pruned")
    backbone = pruned.backbone
    assert sum(backbone.num_heads_per_layer) == 4  # half of 2 x 4
    assert sum(backbone.intermediate_dim_per_layer) == 256  # half of 2 x 256
    assert pruned.count_params() < 798_747  # the unpruned classifier's
    card = zoo.preset_card("fortunes_classifier_pruned")
    pattern = r"Test split: accuracy (0\.\d+), .*?\(unpruned (0\.\d+)"
    claimed, unpruned = (float(x) for x in re.search(pattern, card).groups())
    # Its unpruned figure is the unpruned card's, and the gap is as stated.
    full = zoo.preset_card("fortunes_classifier")
    assert f"Test split: accuracy {unpruned:.3f}" in full
    gap = round(100 * (unpruned - claimed), 1)
    assert ("within 1 point" in card) == (gap <= 1), gap
    # ... and its accuracy is what the shipped weights score on the test split.
    texts, labels = fortune_splits(seed=0)["test"]
    assert len(labels) > 1000
    data = classification_dataset(texts, labels, pruned.tokenizer, 64, 128)
    logits, labels = predict_with_labels(pruned, data)
    accuracy = float(np.mean(logits.argmax(-1) == labels))
    assert abs(accuracy - claimed) <= 0.0005 + 1.5 / len(labels)
    assert pruned.classify("Real programmers use vi.") in pruned.class_names
