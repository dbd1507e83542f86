"""`tf.data` pipelines for next-token prediction on a stream of text."""

import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.validation import check_positive_int


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
    check_positive_int("sequence_length", sequence_length)
    check_positive_int("batch_size", batch_size)
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(
            "`validation_fraction` must be in [0, 1). "
            f"Received: validation_fraction={validation_fraction}"
        )
    ids = np.asarray(tokenizer(text), dtype="int32")
    train_end, end = split_offsets(len(ids), sequence_length, validation_fraction)
    train = next_token_windows(ids[:train_end], sequence_length)
    validation = ids[train_end:end].reshape(-1, sequence_length + 1)
    return (
        window_dataset(train, batch_size, shuffle=True, seed=seed),
        window_dataset(validation, batch_size),
    )


def window_dataset(windows, batch_size, shuffle=False, seed=0):
    """A `tf.data.Dataset` of `(w[:-1], w[1:])` batches from token windows.

    Args:
        windows: an int array (num_windows, sequence_length + 1), e.g. from
            `next_token_windows`.
        batch_size: windows per batch.
        shuffle: reshuffle the windows every pass, with `seed`.
        seed: the shuffling seed.

    Example:
    >>> x, y = next(iter(window_dataset([[1, 2, 3], [4, 5, 6]], 2)))
    >>> x.numpy().tolist(), y.numpy().tolist()
    ([[1, 2], [4, 5]], [[2, 3], [5, 6]])
    """
    dataset = tf.data.Dataset.from_tensor_slices(np.asarray(windows, "int32"))
    if shuffle:
        dataset = dataset.shuffle(
            len(windows), seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.map(lambda w: (w[:-1], w[1:]))
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


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


def split_at_line(text, validation_fraction):
    """`(train_text, held_out_text)`: the last `validation_fraction` held out.

    The cut falls at the start of a line (the last one at or before the
    fraction), so no line straddles the split; train the tokenizer on
    `train_text` only.

    Example:
    >>> split_at_line("a\\nb\\nc\\nd\\n", 0.25)
    ('a\\nb\\nc\\n', 'd\\n')
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("`text` must be a non-empty string. Received an empty corpus.")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            "`validation_fraction` must be in (0, 1). "
            f"Received: validation_fraction={validation_fraction}"
        )
    cut = text.rfind("\n", 0, int(len(text) * (1 - validation_fraction))) + 1
    if cut <= 0 or cut >= len(text):
        raise ValueError(
            "`text` has no line break before the held-out fraction: split it "
            "into lines (one sentence or verse a line)."
        )
    return text[:cut], text[cut:]


def interleaved_split(text, num_blocks=100, held_out_every=10):
    """`(train_text, held_out_text)`: every `held_out_every`-th block held out.

    `text` is cut into `num_blocks` blocks of about equal length, each cut
    moved to the start of the next line (a block of the shipped Genesis and
    Exodus, about 3.7 kB, is about a chapter), and blocks `held_out_every -
    1`, `2 * held_out_every - 1`, ... (the 10th, 20th, ... 100th by default)
    are held out. The held-out text is then spread through the whole text
    instead of being its end: the end of a book is not a fair sample of it
    (the last chapters of Exodus repeat earlier ones almost word for word,
    which a compressor that has read them copies and a model with a short
    context cannot). Each part is the concatenation of its blocks, in order.

    Args:
        text: a non-empty string.
        num_blocks: how many blocks to cut the text into.
        held_out_every: hold out one block in this many (at least 2).

    Example:
    >>> text = "".join(f"line {i}\\n" for i in range(8))
    >>> train, held_out = interleaved_split(text, num_blocks=4, held_out_every=2)
    >>> held_out
    'line 2\\nline 3\\nline 6\\nline 7\\n'
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("`text` must be a non-empty string. Received an empty corpus.")
    check_positive_int("num_blocks", num_blocks)
    if isinstance(held_out_every, bool) or not isinstance(held_out_every, int) or (
        not 2 <= held_out_every <= num_blocks
    ):
        raise ValueError(
            f"`held_out_every` must be an integer in [2, num_blocks={num_blocks}]. "
            f"Received: held_out_every={held_out_every!r}"
        )
    cuts = [0]
    for k in range(1, num_blocks):
        target = len(text) * k // num_blocks
        line_start = text.find("\n", target - 1) + 1  # first at or after it
        next_target = len(text) * (k + 1) // num_blocks
        cut = line_start if 0 < line_start <= next_target else target
        cuts.append(max(cut, cuts[-1]))
    cuts.append(len(text))
    blocks = [text[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    if not all(blocks):
        raise ValueError(
            f"`text` of {len(text)} characters is too short to split into "
            f"{num_blocks} blocks. Received: {text[:40]!r}"
        )
    held_out = [i % held_out_every == held_out_every - 1 for i in range(num_blocks)]
    train = "".join(b for b, out in zip(blocks, held_out, strict=True) if not out)
    validation = "".join(b for b, out in zip(blocks, held_out, strict=True) if out)
    return train, validation


def next_token_windows(ids, sequence_length, overlap=False):
    """Windows of `sequence_length + 1` token ids, for (`w[:-1]`, `w[1:]`) pairs.

    Without `overlap` the windows are disjoint (training: one token in
    `sequence_length + 1` is never a label). With it each window starts at its
    predecessor's last token, so every token but the first is a label exactly
    once: the held-out loss then covers `ids[1 : 1 + len(windows) *
    sequence_length]`. The tail shorter than a window is dropped.

    Returns:
        An int32 array (num_windows, sequence_length + 1).

    Example:
    >>> next_token_windows(list(range(7)), 2, overlap=True).tolist()
    [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    """
    ids = np.asarray(ids, dtype="int32").reshape(-1)
    check_positive_int("sequence_length", sequence_length)
    stride = sequence_length if overlap else sequence_length + 1
    count = (len(ids) - 1) // stride if overlap else len(ids) // stride
    if count < 1:
        raise ValueError(
            f"{len(ids)} tokens make no window of sequence_length={sequence_length} "
            "(+1): use more text or shorter sequences."
        )
    starts = np.arange(count)[:, None] * stride
    return ids[starts + np.arange(sequence_length + 1)]
