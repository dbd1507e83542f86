"""German -> English sentence pairs from Debian's `trans-de-en` dictionary.

The dictionary (Frank Richter's TU Chemnitz dictionary, GPL-2.0-or-later) is
read where the Debian package installs it, `/usr/share/trans/de-en`; it is
never copied into this repository. Each line is `German :: English`:

    Aalsuppe {f} [cook.] | Aalsuppen {pl} :: eel soup | eel soups
    Auf Ihre Gesundheit!; Auf Ihr Wohl! :: Here's to you!

` | ` separates sub-entries that align one to one across the sides, `; `
separates synonyms, and `{...}`, `[...]`, `(...)`, `<...>` are grammar,
domain and spelling labels, which are removed. Lines starting with `#` are
the header; lines whose sides have different numbers of sub-entries are
skipped.

A pair is *sentence-like* when both sides end in `.`, `!` or `?` and have at
least `min_words` (default 3) words: about 20,000 of the dictionary's few
hundred thousand pairs, e.g. `Das ist doch nicht möglich.` ->
`That really isn't possible.`
"""

import re
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_tfm.data.bucketing import batch_by_length
from keras_tfm.data.detokenization import join_word_pieces
from keras_tfm.data.tokenizers import train_word_piece_tokenizer

TRANS_DE_EN_PATH = "/usr/share/trans/de-en"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")  # ids 0, 1, 2, 3

_LABEL = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:%)\]}»“”])")


def strip_annotations(text):
    """`text` without `{...}`, `[...]`, `(...)`, `<...>` labels, spaces collapsed.

    Example:
    >>> strip_annotations("Aal {m} (auf der Speisekarte) [cook.]")
    'Aal'
    """
    previous = None
    while previous != text:  # nested labels, e.g. "(a (b) c)"
        previous, text = text, _LABEL.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def parse_dictionary_line(line):
    """The aligned sub-entries of one dictionary line.

    Returns:
        A list of `(german_synonyms, english_synonyms)` tuples of strings,
        one per sub-entry, labels removed; empty for header, blank or
        malformed lines (no ` :: `, or different sub-entry counts).

    Example:
    >>> parse_dictionary_line("Aalsuppe {f} | Aalsuppen {pl} :: eel soup | eel soups")
    [(('Aalsuppe',), ('eel soup',)), (('Aalsuppen',), ('eel soups',))]
    """
    line = line.strip()
    if not line or line.startswith("#") or " :: " not in line:
        return []
    german, english = line.split(" :: ", 1)
    german, english = german.split(" | "), english.split(" | ")
    if len(german) != len(english):
        return []
    entries = []
    for de, en in zip(german, english, strict=True):
        de_synonyms = tuple(s for s in map(strip_annotations, de.split("; ")) if s)
        en_synonyms = tuple(s for s in map(strip_annotations, en.split("; ")) if s)
        if de_synonyms and en_synonyms:
            entries.append((de_synonyms, en_synonyms))
    return entries


def is_sentence_like(text, min_words=3):
    """Whether `text` ends in `.`, `!` or `?` and has at least `min_words` words."""
    return text[-1:] in (".", "!", "?") and len(text.split()) >= min_words


def load_translation_pairs(path=None, sentence_like=True, min_words=3):
    """The (German, English) pairs of the `trans-de-en` dictionary.

    Every German synonym of a sub-entry is paired with every English synonym
    of the same sub-entry. Duplicate pairs are dropped; the order is the
    file's.

    Args:
        path: the dictionary file; default `/usr/share/trans/de-en`.
        sentence_like: keep only pairs whose sides are both sentence-like.
        min_words: the fewest words of a sentence-like side.

    Returns:
        A list of `(german, english)` string tuples.

    Raises:
        ValueError: if the file is missing (install the `trans-de-en` Debian
            package) or holds no pair.

    Example:
    >>> pairs = load_translation_pairs()
    >>> ("Das ist doch nicht möglich.", "That really isn't possible.") in pairs
    True
    """
    if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 1:
        raise ValueError(
            f"`min_words` must be a positive integer. Received: min_words={min_words!r}"
        )
    path = Path(TRANS_DE_EN_PATH if path is None else path)
    if not path.is_file():
        raise ValueError(
            f"The German-English dictionary is missing: {path} does not exist. "
            "Install the Debian package `trans-de-en` (apt-get install -y "
            f"trans-de-en) or pass its location. Received: path={str(path)!r}"
        )
    pairs, seen = [], set()
    with path.open(encoding="utf-8") as f:
        for line in f:
            for de_synonyms, en_synonyms in parse_dictionary_line(line):
                for de in de_synonyms:
                    for en in en_synonyms:
                        if (de, en) in seen:
                            continue
                        if sentence_like and not (
                            is_sentence_like(de, min_words)
                            and is_sentence_like(en, min_words)
                        ):
                            continue
                        seen.add((de, en))
                        pairs.append((de, en))
    if not pairs:
        raise ValueError(
            f"{path} holds no {'sentence-like ' if sentence_like else ''}"
            "`German :: English` pairs."
        )
    return pairs


def split_translation_pairs(
    pairs, validation_fraction=0.05, test_fraction=0.05, seed=0
):
    """A deterministic (train, validation, test) split that never leaks.

    Pairs sharing a German or an English sentence (synonyms, repeated
    entries) form one group, and a group goes to one split only, so no
    sentence of the validation or test split is seen in training. Groups are
    shuffled with `seed`; the splits keep the input order within them.

    Example:
    >>> train, val, test = split_translation_pairs(pairs, 0.1, 0.1, seed=0)
    """
    for name, value in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value}")
    if validation_fraction + test_fraction >= 1.0:
        raise ValueError(
            "`validation_fraction + test_fraction` must be below 1. Received: "
            f"validation_fraction={validation_fraction}, test_fraction={test_fraction}"
        )
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty. Received: pairs=[]")
    # Union-find over sentences: a pair links its German and English sides.
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for de, en in pairs:
        parent[find(("de", de))] = find(("en", en))
    roots = sorted({find(("de", de)) for de, _ in pairs})
    order = np.random.default_rng(seed).permutation(len(roots))
    num_test = int(round(len(roots) * test_fraction))
    num_validation = int(round(len(roots) * validation_fraction))
    split_of = {}
    for rank, i in enumerate(order):
        split_of[roots[i]] = (
            2 if rank < num_test else 1 if rank < num_test + num_validation else 0
        )
    splits = ([], [], [])
    for pair in pairs:
        splits[split_of[find(("de", pair[0]))]].append(pair)
    return splits


def train_translation_tokenizer(texts, vocabulary_size, lowercase=False):
    """A keras-hub `WordPieceTokenizer` with a vocabulary learned from `texts`.

    `train_word_piece_tokenizer` with the translation special tokens: the
    vocabulary starts with `[PAD]`=0, `[UNK]`=1, `[START]`=2, `[END]`=3, and
    accents are kept (German umlauts); train it on both languages' training
    sentences for a shared vocabulary.

    Example:
    >>> tokenizer = train_translation_tokenizer(["Guten Tag.", "Good day."], 40)
    >>> tokenizer.token_to_id("[END]")
    3
    """
    if not isinstance(texts, str | tf.data.Dataset):
        texts = list(texts)  # any iterable of strings, as before
    return train_word_piece_tokenizer(
        texts,
        vocabulary_size,
        lowercase=lowercase,
        strip_accents=False,
        reserved_tokens=SPECIAL_TOKENS,
        name="tokenizer",
    )


def detokenize_text(text):
    """Joins WordPiece output back into plain text for BLEU and for reading.

    `WordPieceTokenizer.detokenize` puts a space between every word piece
    that is not a `##` suffix, so punctuation ends up spaced out; this
    respaces its tokens with `keras_tfm.data.detokenization.join_word_pieces`.

    Example:
    >>> detokenize_text("That really isn ' t possible .")
    "That really isn't possible."
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return join_word_pieces(text.split())


def _token_lists(ids):
    if hasattr(ids, "to_list"):
        ids = ids.to_list()
    return [[int(i) for i in row] for row in ids]


def translation_dataset(
    pairs,
    tokenizer,
    batch_size,
    max_length=32,
    shuffle=False,
    seed=0,
    bucket_boundaries=(8, 16, 24),
):
    """A `tf.data` pipeline of teacher-forced batches, batched by length.

    Each pair becomes `source_ids` = tokens(German), decoder inputs
    `target_ids` = [START] + tokens(English) and labels = tokens(English) +
    [END]; pairs longer than `max_length - 1` tokens on either side are
    dropped. Pairs of similar lengths are batched together
    (`batch_by_length`), each batch padded with 0 to its bucket's boundary
    (or `max_length`), so a compiled `fit` sees few shapes.

    Args:
        pairs: `(german, english)` string tuples.
        tokenizer: from `train_translation_tokenizer` ([START]=2, [END]=3).
        batch_size: pairs per batch.
        max_length: the longest sequence, in tokens, with [START]/[END].
        shuffle: shuffle the pairs each epoch (training).
        seed: the shuffle seed.
        bucket_boundaries: increasing lengths that separate the buckets.

    Returns:
        A dataset of `({"source_ids", "target_ids"}, labels)` int32 batches.

    Example:
    >>> dataset = translation_dataset(train, tokenizer, batch_size=64)
    >>> model.fit(dataset, epochs=10)
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty. Received: pairs=[]")
    for name, value in (("batch_size", batch_size), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"`{name}` must be a positive integer. Received: {value!r}"
            )
    start = tokenizer.token_to_id("[START]")
    end = tokenizer.token_to_id("[END]")
    german = _token_lists(tokenizer([de for de, _ in pairs]))
    english = _token_lists(tokenizer([en for _, en in pairs]))
    examples = [
        (de, [start, *en], [*en, end])
        for de, en in zip(german, english, strict=True)
        if 0 < len(de) <= max_length - 1 and len(en) <= max_length - 1
    ]
    if not examples:
        raise ValueError(
            f"No pair fits max_length={max_length} tokens. Received: {len(pairs)} pairs"
        )

    def generator():
        yield from examples

    spec = tf.TensorSpec((None,), tf.int32)
    dataset = tf.data.Dataset.from_generator(generator, output_signature=(spec,) * 3)
    dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(
            len(examples), seed=seed, reshuffle_each_iteration=True
        )
    boundaries = [b for b in bucket_boundaries if b < max_length] + [max_length]
    dataset = batch_by_length(dataset, batch_size, boundaries, padding_id=0)
    dataset = dataset.map(
        lambda s, t, y: ({"source_ids": s, "target_ids": t}, y),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    # The number of batches is fixed by the lengths alone (each bucket ends
    # with one partial batch): stating it lets Keras show progress and stops
    # it from warning that the input "ran out of data".
    lengths = np.array([max(len(s), len(y)) for s, _, y in examples])
    buckets = np.searchsorted(np.array(boundaries), lengths)
    batches = sum(-(-int(n) // batch_size) for n in np.bincount(buckets) if n)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)
