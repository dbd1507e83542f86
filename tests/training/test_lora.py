import keras
import numpy as np
import pytest

from keras_tfm.saving import load_model
from keras_tfm.training import enable_lora
from tests.builders import causal_lm

HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCABULARY, LAYERS = 16, 4, 2, 24, 40, 2


def tiny_llama(**kwargs):
    """Llama's layout (GQA, SwiGLU, RMSNorm, rotary) plus biases and an untied head."""
    arguments = dict(
        vocabulary_size=VOCABULARY,
        num_layers=LAYERS,
        num_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=INTERMEDIATE,
        max_sequence_length=16,
        activation="swiglu",
        normalization="rms_norm",
        position_encoding="rotary",
        use_bias=True,
        tie_word_embeddings=False,
    )
    return causal_lm(**{**arguments, **kwargs})


def lora_parameters(rank):
    """rank * (in + out) per adapted kernel, from the architecture's shapes."""
    head_dim = HIDDEN // HEADS
    per_block = [
        (HIDDEN, HIDDEN),  # query
        (HIDDEN, 2 * KV_HEADS * head_dim),  # key_value, fused
        (HIDDEN, HIDDEN),  # attention_output
        (HIDDEN, 2 * INTERMEDIATE),  # intermediate: SwiGLU's gate and up, fused
        (INTERMEDIATE, HIDDEN),  # output
    ]
    kernels = LAYERS * per_block + [(HIDDEN, VOCABULARY)]  # + lm_head
    return sum(rank * (fan_in + fan_out) for fan_in, fan_out in kernels)


def test_only_the_adapters_train_and_their_count_follows_the_formula():
    model = tiny_llama()
    adapted = enable_lora(model, rank=3)
    assert len(adapted) == 5 * LAYERS + 1
    names = [w.path for w in model.trainable_weights]
    assert all(n.endswith(("/lora_kernel_a", "/lora_kernel_b")) for n in names)
    assert len(names) == 2 * len(adapted)
    count = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert count == lora_parameters(3)
    # Biases, embeddings and norm scales are frozen too (Keras leaves biases).
    frozen = {w.path for w in model.non_trainable_weights}
    assert "transformer_layer_0/self_attention/query/bias" in frozen
    assert "token_embedding/embeddings" in frozen
    assert "final_norm/scale" in frozen


def test_the_function_is_unchanged_until_training_and_frozen_weights_stay():
    model = tiny_llama()
    ids = np.array([[3, 4, 5, 6, 7, 8]])
    before = np.asarray(model(ids))
    enable_lora(model, rank=2, lora_alpha=4)
    np.testing.assert_array_equal(np.asarray(model(ids)), before)  # B = 0
    frozen = {
        w.path: keras.ops.convert_to_numpy(w) for w in model.non_trainable_weights
    }
    adapters = {w.path: keras.ops.convert_to_numpy(w) for w in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(ids, np.ones((1, 6, VOCABULARY)), epochs=2, verbose=0)
    for weight in model.non_trainable_weights:
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(weight), frozen[weight.path]
        )
    moved = [
        w
        for w in model.trainable_weights
        if np.any(keras.ops.convert_to_numpy(w) != adapters[w.path])
    ]
    assert len(moved) == len(adapters)  # B first, then A once B is not zero
    assert np.abs(np.asarray(model(ids)) - before).max() > 1e-6


def test_a_fine_tuned_model_saves_and_loads_with_its_adapters_and_optimizer(
    tmp_path,
):
    """Regression: a reloaded LoRA model had every weight trainable again, so its
    optimizer (built for the adapters) did not load, and Keras's merged save
    zeroed A and B, which then could never train."""
    model = tiny_llama()
    ids = np.array([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    targets = np.ones((2, 6, VOCABULARY))
    enable_lora(model, rank=2, lora_alpha=4, layer_names=["query", "lm_head"])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(ids, targets, epochs=2, verbose=0)
    path = tmp_path / "lora.keras"
    model.save(path)
    loaded = load_model(path)  # a warning (optimizer not loaded) fails the test
    np.testing.assert_array_equal(np.asarray(loaded(ids)), np.asarray(model(ids)))
    assert [w.path for w in loaded.trainable_weights] == [
        w.path for w in model.trainable_weights
    ]
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
    # One more step from the restored state is the step the original takes.
    model.fit(ids, targets, epochs=1, verbose=0)
    loaded.fit(ids, targets, epochs=1, verbose=0)
    for mine, theirs in zip(model.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(theirs), np.asarray(mine))


def test_lora_alpha_scales_the_update():
    model = tiny_llama()
    enable_lora(model, rank=2, lora_alpha=6.0, layer_names=["output"])
    layer = model.backbone.transformer_layers[0].feed_forward.output_dense
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(INTERMEDIATE, 2)), rng.normal(size=(2, HIDDEN))
    layer.lora_kernel_a.assign(a)
    layer.lora_kernel_b.assign(b)
    w = keras.ops.convert_to_numpy(layer._kernel).astype("float64")
    np.testing.assert_allclose(
        np.asarray(layer.kernel), w + 6.0 / 2 * a @ b, rtol=1e-5, atol=1e-6
    )


def test_layer_names_select_the_projections():
    model = tiny_llama()
    adapted = enable_lora(model, rank=1, layer_names=("query", "key_value"))
    assert sorted({layer.name for layer in adapted}) == ["key_value", "query"]
    assert len(model.trainable_weights) == 2 * 2 * LAYERS


def test_generation_compiled_before_uses_the_adapters_after():
    model = tiny_llama(padding_id=None)
    prompt = [3, 4, 5]
    before = model.generate(prompt, max_new_tokens=4)  # compiled without adapters
    enable_lora(model, rank=2)
    rng = np.random.default_rng(1)
    for weight in model.trainable_weights:
        weight.assign(rng.normal(size=weight.shape))
    # Reference: greedy decoding by full forward passes, no cache.
    ids = list(prompt)
    for _ in range(4):
        ids.append(int(np.argmax(np.asarray(model(np.array([ids])))[0, -1])))
    assert model.generate(prompt, max_new_tokens=4) == ids
    assert ids != before  # so a stale loop would have failed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rank=0), "rank"),
        (dict(rank=2.5), "rank"),
        (dict(rank=2, lora_alpha=-1), "lora_alpha"),
        (dict(rank=2, layer_names=["nope"]), "nope"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        enable_lora(tiny_llama(), **kwargs)


def test_twice_and_unbuilt_are_errors():
    model = tiny_llama()
    enable_lora(model, rank=2)
    with pytest.raises(ValueError, match="already enabled"):
        enable_lora(model, rank=2)
    with pytest.raises(ValueError, match="built"):
        enable_lora(keras.layers.Dense(3), rank=2)
    with pytest.raises(ValueError, match="Keras model or layer"):
        enable_lora("model", rank=2)
