"""The model stack on JAX without TensorFlow: run by test_without_tensorflow.py.

`python jax_checks.py save DIR` trains and saves; `... load DIR` (a fresh
process, after only `import keras_tfm`) loads and compares. Prints "ok".
"""

import importlib
import os
import sys

# First: every later import is checked.
sys.path.insert(0, os.path.dirname(__file__))
block_tensorflow = importlib.import_module("block_tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_tfm  # noqa: E402

assert keras.backend.backend() == "jax", keras.backend.backend()
IDS = np.array([[5, 6, 7, 8, 9], [3, 4, 2, 0, 0]], "int32")


def classifier_inputs():
    return {"token_ids": IDS, "padding_mask": IDS != 0}


def attention_on_jax():
    """JAX's fused route equals a float64 reference, padding and all."""
    from keras_tfm.kernels import attention, fused_attention

    calls = []
    fused = fused_attention.fused_dot_product_attention
    fused_attention.fused_dot_product_attention = lambda *a: (
        calls.append(a) or fused(*a)
    )
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 5, 4, 8)).astype("float32")
    k, v = (rng.normal(size=(2, 5, 2, 8)).astype("float32") for _ in range(2))
    key_mask = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], bool)  # left padding
    out, _ = attention.dot_product_attention(q, k, v, key_mask, causal_start=0,
                                             scale=0.3)  # fmt: skip
    assert len(calls) == 1
    keep = key_mask[:, None, :] & np.tril(np.ones((5, 5), bool))[None]
    kk, vv = (np.repeat(a.astype("float64"), 2, axis=2) for a in (k, v))
    logits = np.einsum("bthd,bshd->bhts", q.astype("float64"), kk) * 0.3
    logits = np.where(keep[:, None], logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    weights = np.exp(logits - np.where(np.isfinite(peak), peak, 0.0))
    total = weights.sum(-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    expected = np.einsum("bhts,bshd->bthd", weights, vv)
    np.testing.assert_allclose(ops.convert_to_numpy(out), expected, atol=2e-6)
    fused_attention.fused_dot_product_attention = fused


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]",
         "the", "cat", "sat", "a", "dog", "ran"]  # fmt: skip
TEXTS = ["the cat sat", "a dog ran", "the dog sat", "a cat ran"]


def fit_on_strings():
    """`fit`, `evaluate` and `predict` on raw strings read by the Python path
    (TextBatches): a classifier, a causal LM and a masked LM (masking too)."""
    import keras_hub

    from keras_tfm import models

    keras.utils.set_random_seed(0)
    words = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=WORDS, special_tokens=WORDS[:7], oov_token="[UNK]"
    )
    small = dict(vocabulary_size=len(WORDS), num_layers=1, num_heads=2,
                 hidden_dim=16, intermediate_dim=32, max_sequence_length=8,
                 dropout=0.0)  # fmt: skip
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    preprocessor = models.TextClassifierPreprocessor(words, sequence_length=6)
    classifier = models.EncoderClassifier(
        models.EncoderBackbone(**small), num_classes=2, preprocessor=preprocessor
    )
    classifier.compile(keras.optimizers.SGD(0.5), loss)  # no optimizer state
    labels = np.array([0, 1, 0, 1])
    # The strings' batches are what the preprocessor makes of them: the same
    # loss, and one epoch in order trains the same weights as on the ids.
    by_strings = classifier.evaluate(TEXTS, labels, verbose=0)
    by_ids = classifier.evaluate(preprocessor(TEXTS), labels, verbose=0)
    np.testing.assert_allclose(by_strings, by_ids, rtol=1e-6)
    start = classifier.get_weights()
    classifier.fit(TEXTS, labels, batch_size=2, shuffle=False, verbose=0)
    on_strings = classifier.get_weights()
    classifier.set_weights(start)
    classifier.fit(preprocessor(TEXTS), labels, batch_size=2, shuffle=False,
                   verbose=0)  # fmt: skip
    moved = [np.abs(a - b).max() for a, b in zip(on_strings, start, strict=True)]
    assert max(moved) > 1e-4, moved  # it trained (the head starts at zero)
    for got, expected in zip(on_strings, classifier.get_weights(), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert classifier.predict(TEXTS, verbose=0).shape == (4, 2)
    try:  # a bad label names itself, as on TensorFlow
        classifier.fit(TEXTS, np.array([0, 1, 2, 1]), verbose=0)
    except ValueError as error:
        assert "class ids in [0, 2)" in str(error), error
    else:
        raise AssertionError("a label of 2 trained a 2-class classifier")

    lm = models.CausalLM(
        models.DecoderBackbone(**small),
        preprocessor=models.CausalLMPreprocessor(words, sequence_length=6),
    )
    lm.compile(keras.optimizers.Adam(1e-2), loss)
    losses = lm.fit(TEXTS * 2, epochs=3, batch_size=4, verbose=0).history["loss"]
    assert losses[-1] < losses[0], losses

    mlm = models.MaskedLanguageModel(
        models.EncoderBackbone(**small),
        preprocessor=models.MaskedLMPreprocessor(
            words, sequence_length=6, mask_selection_rate=0.5,
            mask_selection_length=2,
        ),
    )  # fmt: skip
    x, y, weights = mlm.preprocessor(TEXTS)  # masked in Python
    packed = preprocessor(TEXTS)["token_ids"]  # [CLS] text [SEP], unmasked
    positions = ops.convert_to_numpy(x["mask_positions"])
    picked = np.take_along_axis(ops.convert_to_numpy(packed), positions, axis=1)
    selected = ops.convert_to_numpy(weights) > 0
    assert selected.any()
    np.testing.assert_array_equal(ops.convert_to_numpy(y)[selected], picked[selected])
    mlm.compile(keras.optimizers.Adam(1e-2), loss)
    history = mlm.fit(TEXTS, epochs=1, verbose=0).history["loss"]
    assert np.isfinite(history[0]), history


def loss_from_hidden_states():
    """`fit` on the hidden states (the chunked loss's custom gradient, block
    rematerialization) trains the weights `fit` on the logits trains."""
    from keras_tfm import models

    rng = np.random.default_rng(1)
    ids, labels = rng.integers(1, 37, (8, 12)), rng.integers(0, 37, (8, 12))
    weights = []
    for on_hidden in (False, True):
        keras.utils.set_random_seed(0)
        lm = models.CausalLM(models.DecoderBackbone(
            vocabulary_size=37, num_layers=2, num_heads=2, hidden_dim=16,
            intermediate_dim=32, max_sequence_length=16,
        ))  # fmt: skip
        lm.loss_from_hidden_states = on_hidden
        lm.backbone.rematerialize_blocks = on_hidden
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=3
        )
        lm.compile(keras.optimizers.SGD(0.5), loss)
        lm.fit(ids, labels, batch_size=4, epochs=2, shuffle=False, verbose=0)
        assert lm.trains_on_hidden_states() == on_hidden
        weights.append(lm.get_weights())
    for a, b in zip(*weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def train_command(folder):
    """`keras-tfm train`, the main job, end to end with a tiny setting: it
    says it trains with JAX, writes its file and gives a finite loss."""
    import contextlib
    import io

    from keras_tfm.cli import main

    text = os.path.join(folder, "text.txt")
    with open(text, "w") as f:
        f.write(
            "".join(f"In the beginning {i % 7} was the word.\n" for i in range(200))
        )
    output = os.path.join(folder, "trained.keras")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main([
            "train", "--preset", "gpt_tiny", "--data", text, "--epochs", "1",
            "--batch-size", "8", "--sequence-length", "16", "--vocabulary-size",
            "256", "--output", output, "--no-samples", "--peak-flops", "1e11",
        ])  # fmt: skip
    printed = printed.getvalue()
    assert "Training with JAX on the CPU" in printed, printed
    assert "float32, XLA on" in printed, printed  # no op-by-op JAX
    assert os.path.exists(output), printed
    assert "model (gpt_tiny)" in printed, printed


def save(folder):
    from keras_tfm import layers, models

    attention_on_jax()
    fit_on_strings()
    loss_from_hidden_states()
    train_command(folder)

    # The README's layers example, fitted.
    inputs = keras.Input((None,), dtype="int32")
    x = layers.TokenEmbedding(100, 16, mask_zero=True, scale_embeddings=True)(inputs)
    x = layers.PositionalEncoding()(x)
    x = layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32)(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(x[:, 0]))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(IDS, np.array([0, 1]), epochs=1, verbose=0)

    # A causal LM fitted on token ids (learned positions: the slice JAX refused).
    backbone = models.DecoderBackbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=8,
    )  # fmt: skip
    lm = models.CausalLM(backbone)
    lm.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    ids = np.tile(np.arange(1, 9, dtype="int32"), (8, 1))
    losses = lm.fit(ids[:, :-1], ids[:, 1:], epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0], losses
    np.save(os.path.join(folder, "lm.npy"), ops.convert_to_numpy(lm(IDS)))
    lm.save(os.path.join(folder, "lm.keras"))

    encoder = models.EncoderBackbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=8,
    )  # fmt: skip
    classifier = models.EncoderClassifier(encoder, num_classes=3)
    classifier.compile(
        "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    classifier.fit(classifier_inputs(), np.array([0, 2]), epochs=1, verbose=0)
    out = ops.convert_to_numpy(classifier(classifier_inputs()))
    np.save(os.path.join(folder, "classifier.npy"), out)
    classifier.save(os.path.join(folder, "classifier.keras"))


def load(folder):
    lm = keras.saving.load_model(os.path.join(folder, "lm.keras"))
    assert type(lm).__name__ == "CausalLM"
    np.testing.assert_allclose(
        ops.convert_to_numpy(lm(IDS)), np.load(os.path.join(folder, "lm.npy")),
        atol=1e-6,
    )  # fmt: skip
    classifier = keras.saving.load_model(os.path.join(folder, "classifier.keras"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(classifier(classifier_inputs())),
        np.load(os.path.join(folder, "classifier.npy")),
        atol=1e-6,
    )
    # `keras-tfm chat`'s entry writer imports no TensorFlow (a preset's
    # template is filled without it) and starts no converter process here.
    from keras_tfm.chat import entry_writer

    block_tensorflow.check_not_imported()
    assert entry_writer.start_chat_entry(lm, "lm.keras", "float32", {}) is None
    block_tensorflow.ATTEMPTS.clear()  # its lookup of TensorFlow, refused here
    # A TensorFlow-only feature says what to install.
    block_tensorflow.check_not_imported()
    block_tensorflow.ATTEMPTS.clear()  # the one attempt below
    try:
        _ = keras_tfm.export
    except ImportError as error:
        assert "pip install tensorflow" in str(error), error
    else:
        raise AssertionError("keras_tfm.export imported without TensorFlow")
    block_tensorflow.ATTEMPTS.clear()  # that one was asked for


{"save": save, "load": load}[sys.argv[1]](sys.argv[2])
block_tensorflow.check_not_imported()
print("ok")
