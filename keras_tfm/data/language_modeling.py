"""`tf.data` pipelines for next-token prediction on a stream of text."""

import numpy as np
import tensorflow as tf


def language_model_datasets(
    text,
    tokenizer,
    sequence_length,
    batch_size,
    validation_fraction=0.1,
    seed=0,
):
    """Splits `text` into (train, validation) datasets of next-token pairs.

    The text is tokenized as one stream and cut into windows of
    `sequence_length + 1` tokens; a window gives inputs `w[:-1]` and labels
    `w[1:]`. The last `validation_fraction` of the windows (in text order, so
    that no sentence straddles the split) is the validation set: the split is
    deterministic. Training windows are shuffled with `seed` each epoch.

    Args:
        text: a string.
        tokenizer: a keras-hub tokenizer (e.g. `ByteTokenizer`).
        sequence_length: tokens per training example.
        batch_size: examples per batch.
        validation_fraction: share of windows held out, in [0, 1).
        seed: the shuffling seed.

    Returns:
        `(train, validation)` `tf.data.Dataset`s of `(inputs, labels)` int32
        batches of shape (batch, sequence_length).

    Example:
    >>> import keras_hub
    >>> train, val = language_model_datasets(
    ...     "abc " * 200, keras_hub.tokenizers.ByteTokenizer(), 16, 4)
    >>> x, y = next(iter(train))
    >>> x.shape, y.shape
    (TensorShape([4, 16]), TensorShape([4, 16]))
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("`text` must be a non-empty string. Received an empty corpus.")
    for name, value in (
        ("sequence_length", sequence_length),
        ("batch_size", batch_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"`{name}` must be a positive integer. Received: {name}={value!r}"
            )
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(
            "`validation_fraction` must be in [0, 1). "
            f"Received: validation_fraction={validation_fraction}"
        )
    ids = np.asarray(tokenizer(text), dtype="int32")
    window = sequence_length + 1
    train_end, end = split_offsets(len(ids), sequence_length, validation_fraction)
    train_windows = ids[:train_end].reshape(-1, window)
    validation_windows = ids[train_end:end].reshape(-1, window)

    def pairs(array, shuffle):
        dataset = tf.data.Dataset.from_tensor_slices(array)
        if shuffle:
            dataset = dataset.shuffle(
                len(array), seed=seed, reshuffle_each_iteration=True
            )
        dataset = dataset.map(lambda w: (w[:-1], w[1:]))
        return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)

    return pairs(train_windows, True), pairs(validation_windows, False)


def split_offsets(num_tokens, sequence_length, validation_fraction):
    """Where `language_model_datasets` cuts a stream of `num_tokens` tokens.

    Returns `(train_end, end)`: tokens `[0, train_end)` make the training
    windows, `[train_end, end)` the validation windows (the tail after `end`,
    shorter than one window, is dropped). A baseline scored on the same
    held-out tokens uses these offsets.

    Example:
    >>> split_offsets(1000, sequence_length=9, validation_fraction=0.1)
    (900, 1000)
    """
    window = sequence_length + 1
    num_windows = num_tokens // window
    if num_windows < 2:
        raise ValueError(
            f"The text has {num_tokens} tokens: too few for two windows of "
            f"sequence_length={sequence_length} (+1). Use more text or shorter "
            "sequences."
        )
    num_validation = max(1, int(round(num_windows * validation_fraction)))
    if validation_fraction == 0:
        num_validation = 0
    return (num_windows - num_validation) * window, num_windows * window
