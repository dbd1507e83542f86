"""One shared check that every public layer goes through.

`run_layer_test` pins the contract a Keras user relies on: the config round
trip, eager and symbolic calls agreeing, a `.keras` save/load giving
identical outputs, a nonzero gradient reaching every trainable weight and
float input, `fit` moving every weight and lowering a loss, and finite
outputs close to float32 under the mixed-precision policies.
"""

import keras
import numpy as np
import tensorflow as tf


def randomize_weights(layer, seed=0, scale=0.3):
    """Sets every weight to N(0, scale^2) so that biases and norms count too."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0, scale, weight.shape).astype(weight.dtype))


def _symbolic_inputs(inputs):
    return {
        name: keras.Input(shape=value.shape[1:], dtype=str(value.dtype), name=name)
        for name, value in inputs.items()
    }


def _call(layer, tensors, call_kwargs):
    names = list(tensors)
    first, rest = tensors[names[0]], {n: tensors[n] for n in names[1:]}
    outputs = layer(first, **rest, **call_kwargs)
    return outputs[0] if isinstance(outputs, tuple) else outputs


def assert_gradients_reach_every_weight(model, inputs):
    """A random linear function of the output has a nonzero gradient with
    respect to every trainable weight of the layer under test and to every
    float input that is not a mask. A `stop_gradient` (or a weight that the
    output does not depend on) fails it."""
    layer = model.layers[-1]
    tensors = {name: tf.constant(value) for name, value in inputs.items()}
    floats = [
        name
        for name, value in inputs.items()
        if np.issubdtype(value.dtype, np.floating) and "mask" not in name
    ]
    with tf.GradientTape() as tape:
        for name in floats:
            tape.watch(tensors[name])
        outputs = tf.cast(model(tensors), "float32")
        probe = np.random.default_rng(2).normal(size=outputs.shape)
        loss = tf.reduce_sum(outputs * probe.astype("float32"))
    weights = layer.trainable_weights
    gradients = tape.gradient(loss, weights + [tensors[name] for name in floats])
    names = [weight.path for weight in weights] + [f"input {n!r}" for n in floats]
    dead = [
        name
        for name, gradient in zip(names, gradients, strict=True)
        if gradient is None or not np.any(np.asarray(gradient) != 0)
    ]
    assert not dead, f"no gradient reaches {dead}"


def _model(make_layer, inputs, call_kwargs):
    symbolic = _symbolic_inputs(inputs)
    outputs = _call(make_layer(), symbolic, call_kwargs)
    return keras.Model(symbolic, outputs)


def run_layer_test(
    make_layer,
    inputs,
    call_kwargs=None,
    expected_output_shape=None,
    mixed_precision_tolerance=5e-2,
    tmp_path=None,
):
    """Runs the shared checks on the layer built by `make_layer()`.

    Args:
        make_layer: a function returning a new layer.
        inputs: an ordered dict of NumPy arrays: the first is the positional
            input, the others are passed by keyword.
        call_kwargs: further non-tensor call arguments.
        expected_output_shape: the shape of the (first) output.
        mixed_precision_tolerance: max abs difference from float32 allowed
            under mixed_float16 and mixed_bfloat16 (relative to the output's
            scale).
        tmp_path: a folder for the `.keras` file.
    """
    call_kwargs = call_kwargs or {}

    # Config round trip: the restored layer has the same config.
    layer = make_layer()
    config = layer.get_config()
    restored = layer.__class__.from_config(config)
    assert restored.get_config() == config

    # Eager and symbolic calls agree on the output shape.
    model = _model(make_layer, inputs, call_kwargs)
    for inner in model.layers:
        if not isinstance(inner, keras.layers.InputLayer):
            randomize_weights(inner)
    eager = np.asarray(model(inputs))
    if expected_output_shape is not None:
        assert eager.shape == tuple(expected_output_shape)
    assert tuple(model.output.shape[1:]) == eager.shape[1:]
    model.summary(print_fn=lambda *args, **kwargs: None)  # shapes from the build
    assert np.isfinite(eager).all()

    # Config round trip after build: every argument was stored.
    built_layer = model.layers[-1]
    rebuilt = built_layer.__class__.from_config(built_layer.get_config())
    assert rebuilt.get_config() == built_layer.get_config()

    # .keras save and load: identical outputs.
    if tmp_path is not None:
        path = str(tmp_path / "layer_model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        np.testing.assert_array_equal(np.asarray(loaded(inputs)), eager)

    # Mixed precision: finite, and close to float32 with the same weights.
    scale = max(1.0, float(np.abs(eager).max()))
    weights = model.get_weights()
    for policy in ("mixed_float16", "mixed_bfloat16"):
        keras.config.set_dtype_policy(policy)
        try:
            mixed = _model(make_layer, inputs, call_kwargs)
            mixed.set_weights(weights)
            out = np.asarray(keras.ops.cast(mixed(inputs), "float32"))
        finally:
            keras.config.set_dtype_policy("float32")
        assert np.isfinite(out).all(), policy
        error = np.abs(out - eager).max() / scale
        assert error < mixed_precision_tolerance, (policy, error)
    assert_gradients_reach_every_weight(model, inputs)

    # A few fit steps lower the loss (memorising a fixed random target) and
    # move every weight of the layer, not only the fresh Dense head's.
    layer_weights = model.layers[-1].trainable_weights
    before = [np.array(weight.numpy()) for weight in layer_weights]
    symbolic = _symbolic_inputs(inputs)
    trainable = keras.Model(symbolic, keras.layers.Dense(4)(model(symbolic)))
    target = np.random.default_rng(1).normal(size=eager.shape[:-1] + (4,))
    trainable.compile(optimizer=keras.optimizers.Adam(3e-2), loss="mse")
    # 25 steps on the whole batch, as `fit(epochs=25, batch_size=len(x))`
    # takes them (each loss is the step's, before its update), without the
    # set-up of 25 epochs.
    target = target.astype("float32")
    losses = [float(trainable.train_on_batch(inputs, target)) for _ in range(25)]
    assert losses[-1] < 0.7 * losses[0], losses
    still = [
        weight.path
        for weight, old in zip(layer_weights, before, strict=True)
        if np.array_equal(weight.numpy(), old)
    ]
    assert not still, f"fit did not move {still}"

    return eager


def assert_dropout_reaches_every_sublayer(layer, call):
    """Every Dropout inside `layer` sees `training=True` when `call(True)` runs.

    `call(training)` calls the built layer. Also checks that training=False is
    deterministic and training=True is not.
    """
    dropouts = [
        sub for sub in layer._flatten_layers() if isinstance(sub, keras.layers.Dropout)
    ]
    assert dropouts, "the layer has no Dropout sublayers"
    seen = {}
    for dropout in dropouts:

        def spy(inputs, training=None, _dropout=dropout, _call=dropout.call):
            seen[_dropout.path] = training
            return _call(inputs, training=training)

        dropout.call = spy
    try:
        inference = [np.asarray(call(False)) for _ in range(2)]
        np.testing.assert_array_equal(inference[0], inference[1])
        assert set(seen.values()) <= {False, None}
        seen.clear()
        training = np.asarray(call(True))
    finally:
        for dropout in dropouts:
            del dropout.call
    assert {d.path for d in dropouts} == set(seen), (dropouts, seen)
    assert all(flag is True for flag in seen.values()), seen
    assert np.abs(training - inference[0]).max() > 1e-3
