"""Every zoo preset's output on a fixed input, on whichever backend runs this.

Imported by test_strings_without_tensorflow.py (TensorFlow) and by
string_checks.py (JAX, TensorFlow blocked): both build the presets and run
them on the same input, and the test compares the two. The output is what
the task's `call` returns: logits for language models, class logits for
classifiers, embeddings for the sentence encoder, hidden states for a bare
backbone.

Presets with weights (trained here, or converted from a pip package) run
in full, each one. Architecture presets (`preset_weights(name) == "none"`:
random weights) differ from one another only in sizes within a family
(`SIZES`: bert_tiny_test to bert_base, ...), so each family runs once, as
its smallest preset (`ARCHITECTURES`), with weights drawn from NumPy with a
fixed seed on both sides (Keras's initializers draw differently on each
backend; building transformer_big's 214M parameters twice would cost more
than the rest of the check).
"""

import json

import numpy as np

BATCH, LENGTH, PADDED = 2, 7, 3  # the second row ends in PADDED padding ids
# The constructor arguments in which an architecture preset may differ from
# its family's representative.
SIZES = ("name", "hidden_dim", "intermediate_dim", "num_heads", "num_layers",
         "num_encoder_layers", "num_decoder_layers", "vocabulary_size",
         "max_sequence_length", "dropout")  # fmt: skip
ARCHITECTURES = ("bert_tiny_test", "gpt_tiny", "transformer_tiny")


def architecture(name):
    """Preset `name`'s class and arguments other than `SIZES` (as JSON)."""
    from keras_tfm import zoo

    spec = json.loads((zoo.preset_dir(name) / "config.json").read_text("utf-8"))
    options = {k: v for k, v in spec["config"].items() if k not in SIZES}
    return spec["class_name"], json.dumps(options, sort_keys=True)


def compared():
    """The presets whose outputs are compared: those with weights, and
    `ARCHITECTURES`."""
    from keras_tfm import zoo

    weighted = zoo.list_presets(weights="trained") + zoo.list_presets(
        weights="pretrained"
    )
    return sorted(weighted + list(ARCHITECTURES))


def build(name, loaded=None):
    """Preset `name` (the model already in `loaded`, else built)."""
    from keras_tfm import zoo

    if loaded and name in loaded:
        return loaded[name]
    model = zoo.from_preset(name)
    if zoo.preset_weights(name) == "none":
        set_numpy_weights(model)
    return model


def set_numpy_weights(model, seed=0):
    """Every float weight drawn from NumPy: scales (gamma) about 1, the rest
    about 0 (standard deviation 0.05), in the order `model.weights` lists them."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if "float" not in str(weight.dtype):
            continue
        noise = 0.05 * rng.standard_normal(weight.shape, dtype="float32")
        is_scale = weight.name in ("gamma", "scale")
        weight.assign(noise + 1.0 if is_scale else noise)


def _ids(vocabulary_size, padding_id, rng):
    """(BATCH, LENGTH) ids, never the padding id, the last row padded."""
    ids = rng.integers(1, vocabulary_size, (BATCH, LENGTH))
    if padding_id is not None:
        ids[ids == padding_id] = 1 if padding_id != 1 else 2
        ids[-1, -PADDED:] = padding_id
    return ids.astype("int32")


def inputs(model):
    """The fixed input of `model`'s `call`, by the task it is."""
    rng = np.random.default_rng(1)
    kind = type(model).__name__
    if kind == "VisionTransformer":
        return rng.standard_normal((BATCH, *model.image_shape)).astype("float32")
    backbone = getattr(model, "backbone", model)
    ids = _ids(backbone.vocabulary_size, backbone.padding_id, rng)
    if kind == "CausalLM":
        return ids
    if kind == "Seq2SeqLM":
        targets = _ids(backbone.vocabulary_size, backbone.padding_id, rng)
        return {"source_ids": ids, "target_ids": targets[:, :5]}
    mask = np.ones_like(ids, bool)
    mask[-1, -PADDED:] = False
    return {"token_ids": ids, "padding_mask": mask}


def output(model):
    """`model`'s output on its fixed input, as a float32 NumPy array.

    TensorFlow runs the call eagerly (its own kernels, no XLA); JAX runs it
    compiled (`predict_on_batch`: one `jax.jit` program, as `fit` and
    `generate` run, and cheaper than compiling each op of an eager call).
    """
    import keras

    if keras.backend.backend() == "jax":
        out = model.predict_on_batch(inputs(model))
    else:
        out = model(inputs(model))
    return np.asarray(keras.ops.convert_to_numpy(out), "float32")


def outputs(loaded=None):
    """name -> output, for every preset of `compared()`, each built in turn."""
    return {name: output(build(name, loaded)) for name in compared()}
