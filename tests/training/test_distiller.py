import doctest

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.training import Distiller, TokenCrossEntropy
from tests.builders import causal_lm

SCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def kl_to_teacher(teacher, student, x, temperature=1.0, mask=None):
    t = keras.ops.softmax(teacher(x) / temperature, axis=-1).numpy()
    s = keras.ops.softmax(student(x) / temperature, axis=-1).numpy()
    kl = np.sum(t * (np.log(t) - np.log(s)), axis=-1)
    return float(kl.mean() if mask is None else kl[mask].mean())


def mlp(width, seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(width, "relu"), keras.layers.Dense(4)]
    )


def test_distillation_lowers_the_students_kl_to_the_teacher():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    teacher = mlp(32, 1)
    y = np.argmax(teacher(x), axis=-1)  # labels the teacher agrees with
    student = mlp(8, 2)
    before = kl_to_teacher(teacher, student, x)
    distiller = Distiller(teacher, student)
    distiller.compile(
        keras.optimizers.Adam(1e-2), student_loss_fn=SCE, alpha=0.1, temperature=2.0
    )
    teacher_weights = [w.numpy().copy() for w in teacher.weights]
    history = distiller.fit(x, y, epochs=20, batch_size=64, verbose=0).history
    after = kl_to_teacher(teacher, student, x)
    assert after < 0.5 * before, (before, after)
    assert history["distillation_loss"][-1] < history["distillation_loss"][0]
    for old, new in zip(teacher_weights, teacher.weights, strict=True):
        np.testing.assert_array_equal(old, new)  # the teacher stays frozen


def test_token_logits_ignore_padding():
    lm = dict(num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=8)
    keras.utils.set_random_seed(0)
    teacher = causal_lm(vocabulary_size=20, num_layers=1, **lm)
    student = causal_lm(vocabulary_size=20, num_layers=1, **lm)
    x = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 0, 0, 0]])
    y = np.array([[4, 5, 6, 0, 0, 0], [8, 9, 0, 0, 0, 0]])
    distiller = Distiller(teacher, student)
    distiller.compile(
        keras.optimizers.Adam(1e-2),
        student_loss_fn=TokenCrossEntropy(ignore_class=0),
        alpha=0.0,
        temperature=1.0,
        padding_id=0,
    )
    loss = distiller.compute_loss(x, y, distiller(x))
    expected = kl_to_teacher(teacher, student, x, mask=y != 0)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-4)
    before = expected
    distiller.fit(x, y, epochs=15, verbose=0)
    assert kl_to_teacher(teacher, student, x, mask=y != 0) < 0.5 * before


def test_offline_teacher_logits_give_the_online_loss_and_train_the_student():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(128, 8)).astype("float32")
    teacher, student = mlp(32, 1), mlp(8, 2)
    y = np.argmax(teacher(x), axis=-1)
    teacher_logits = np.asarray(teacher(x))
    settings = dict(student_loss_fn=SCE, alpha=0.3, temperature=2.0)
    online, offline = Distiller(teacher, student), Distiller(None, student)
    online.compile("adam", **settings)
    offline.compile("adam", metrics=["accuracy"], **settings)
    y_pred = student(x)
    np.testing.assert_allclose(
        float(offline.compute_loss(x, (y, teacher_logits), y_pred)),
        float(online.compute_loss(x, y, y_pred)),
        rtol=1e-6,
    )
    before = kl_to_teacher(teacher, student, x, temperature=2.0)
    offline.compile(keras.optimizers.Adam(1e-2), metrics=["accuracy"], **settings)
    history = offline.fit(
        x, (y, teacher_logits), epochs=20, batch_size=32, verbose=0
    ).history
    assert kl_to_teacher(teacher, student, x, temperature=2.0) < 0.5 * before
    assert history["accuracy"][-1] > history["accuracy"][0]  # on the labels


def test_bad_arguments():
    teacher, student = mlp(4, 0), mlp(4, 1)
    with pytest.raises(ValueError, match="student=None"):
        Distiller(teacher, None)
    distiller = Distiller(teacher, student)
    with pytest.raises(ValueError, match="alpha=1.5"):
        distiller.compile(student_loss_fn=SCE, alpha=1.5)
    with pytest.raises(ValueError, match="temperature=0"):
        distiller.compile(student_loss_fn=SCE, temperature=0)
    with pytest.raises(ValueError, match="student_loss_fn"):
        distiller.compile()
    x = np.ones((2, 8), "float32")
    offline = Distiller(None, student)
    offline.compile(student_loss_fn=SCE)
    with pytest.raises(ValueError, match="needs targets `\\(labels, teacher_logits"):
        offline.compute_loss(x, np.zeros(2), student(x))
    with pytest.raises(ValueError, match="same number of classes. Received: 3 and 4"):
        offline.compute_loss(x, (np.zeros(2), np.zeros((2, 3))), student(x))


def test_config_round_trip():
    distiller = Distiller(mlp(4, 0), mlp(4, 1))
    restored = Distiller.from_config(distiller.get_config())
    x = np.ones((2, 8), "float32")
    assert restored(x).shape == (2, 4)
    assert not restored.teacher.trainable
    offline = Distiller.from_config(Distiller(None, mlp(4, 1)).get_config())
    assert offline.teacher is None and offline(x).shape == (2, 4)


def test_docstring_example():
    from keras_tfm.training import distiller as module

    result = doctest.testmod(
        module, extraglobs={"np": np, "keras": keras, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0
