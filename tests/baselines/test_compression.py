import math
import shutil
import subprocess

import numpy as np
import pytest

from keras_tfm.baselines import compression_nats_per_byte
from keras_tfm.baselines.compression import COMPRESSORS
from keras_tfm.datasets.default_corpus import load_default_corpus

RNG = np.random.default_rng(0)
# i.i.d. fair coin flips written as the bytes "A"/"B": the source's entropy
# is exactly ln 2 nats per byte, a bound no lossless code can beat on average.
COIN_FLIPS = RNG.choice([65, 66], 200_000).astype(np.uint8).tobytes()


@pytest.mark.parametrize("compressor", ["bzip2", "xz"])
def test_no_better_than_the_source_entropy(compressor):
    train, validation = COIN_FLIPS[:150_000], COIN_FLIPS[150_000:]
    nats = compression_nats_per_byte(train, validation, compressor)
    assert math.log(2) * 0.98 < nats < math.log(2) * 1.5


@pytest.mark.parametrize("compressor", ["bzip2", "xz"])
def test_random_bytes_cost_a_full_byte(compressor):
    data = RNG.integers(0, 256, 60_000, dtype=np.uint8).tobytes()
    nats = compression_nats_per_byte(data[:50_000], data[50_000:], compressor)
    assert nats > 0.98 * math.log(256)


@pytest.mark.parametrize("compressor", ["bzip2", "xz"])
def test_text_seen_in_training_is_nearly_free(compressor):
    text = load_default_corpus().encode()
    train, passage = text[:250_000], text[100_000:102_000]
    seen = compression_nats_per_byte(train, passage, compressor)
    unseen = compression_nats_per_byte(train, text[300_000:302_000], compressor)
    assert seen < 0.5 * unseen


@pytest.mark.parametrize(
    "compressor, command",
    [("bzip2", ["bzip2", "-9", "-c"]), ("xz", ["xz", "-9e", "-c"])],
)
def test_same_bytes_as_the_command_line_tool(compressor, command):
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed (apt-get install -y {compressor})")
    data = COIN_FLIPS[:20_000] + b"The LORD is my shepherd; I shall not want."
    expected = subprocess.run(command, input=data, capture_output=True, check=True)
    assert len(COMPRESSORS[compressor](data)) == len(expected.stdout)


def test_str_and_bytes_agree():
    text = "Ich habe einen Hund. Größe: 3,5 m."
    assert compression_nats_per_byte(text * 3, text) == compression_nats_per_byte(
        (text * 3).encode(), text.encode()
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(train="a", validation=""), "`validation` must not be empty"),
        (dict(train=3, validation="a"), "`train` must be str or bytes"),
        (dict(train="a", validation="b", compressor="gzip"), "`compressor`"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compression_nats_per_byte(**kwargs)


@pytest.mark.parametrize("compressor", ["bzip2", "xz"])
def test_held_out_bytes_are_the_language_models_validation_windows(compressor):
    import keras_hub

    from keras_tfm.baselines import held_out_nats_per_byte
    from keras_tfm.data import language_model_datasets

    text = load_default_corpus()[:30_000] + "Größe, naïve café."  # multi-byte too
    _, validation = language_model_datasets(
        text, keras_hub.tokenizers.ByteTokenizer(lowercase=False), 63, 16, 0.1
    )
    held_out = b"".join(
        np.concatenate([x[:, :1], y], axis=1).astype(np.uint8).tobytes()
        for x, y in validation.as_numpy_iterator()
    )
    data = text.encode()
    start = data.rindex(held_out)
    assert len(data) - start - len(held_out) < 64  # only the partial tail is left
    expected = compression_nats_per_byte(data[:start], held_out, compressor)
    assert held_out_nats_per_byte(text, 63, 0.1, compressor) == expected
