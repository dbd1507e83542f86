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

import functools
import re
from pathlib import Path

import numpy as np

from keras_tfm.validation import check_positive_int

TRANS_DE_EN_PATH = "/usr/share/trans/de-en"

_LABEL = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)|<[^<>]*>")
_LABEL_OPENER = re.compile(r"[{\[(<]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:%)\]}»“”])")
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def strip_annotations(text):
    """`text` without `{...}`, `[...]`, `(...)`, `<...>` labels, spaces collapsed.

    Example:
    >>> strip_annotations("Aal {m} (auf der Speisekarte) [cook.]")
    'Aal'
    """
    # The checks skip regular expressions that would change nothing: this
    # runs over a million times when the dictionary is parsed.
    if _LABEL_OPENER.search(text):
        previous = None
        while previous != text:  # nested labels, e.g. "(a (b) c)"
            previous, text = text, _LABEL.sub(" ", text)
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text) if " " in text else text


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


def dictionary_lines(path=None):
    """The lines of the `trans-de-en` dictionary file, read lazily.

    Raises:
        ValueError: if the file is missing, naming the Debian package.
    """
    path = Path(TRANS_DE_EN_PATH if path is None else path)
    if not path.is_file():
        raise ValueError(
            f"The German-English dictionary is missing: {path} does not exist. "
            "Install the Debian package `trans-de-en` (apt-get install -y "
            f"trans-de-en) or pass its location. Received: path={str(path)!r}"
        )
    with path.open(encoding="utf-8") as f:
        yield from f


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
    check_positive_int("min_words", min_words)
    file, stamp = _file_version(path)
    if not sentence_like:
        return list(_read_pairs(file, stamp, False, min_words))
    # The 20,000 sentence pairs (3 MB) are kept per file version.
    return list(_read_sentence_pairs(file, stamp, min_words))


def parsed_dictionary(path=None):
    """The parsed lines of the dictionary: `(line_index, entries)` pairs.

    `entries` is what `parse_dictionary_line` returns for the line; lines
    without an entry are left out. Parsing the whole dictionary takes about
    6 s, so the result (about 180 MB) is kept per file version: the sentence
    pairs and the word-by-word baseline's lexicon share one parse.

    Example:
    >>> index, entries = parsed_dictionary()[0]
    """
    return _parse(*_file_version(path))


def _file_version(path):
    file = Path(TRANS_DE_EN_PATH if path is None else path)
    return str(file), file.stat().st_mtime_ns if file.is_file() else None


@functools.lru_cache(maxsize=4)
def _parse(path, stamp):
    lines = enumerate(dictionary_lines(path))
    return tuple(
        (index, tuple(entries))
        for index, line in lines
        if (entries := parse_dictionary_line(line))
    )


@functools.lru_cache(maxsize=4)
def _read_sentence_pairs(path, stamp, min_words):
    return _read_pairs(path, stamp, True, min_words)


def _read_pairs(path, stamp, sentence_like, min_words):
    pairs, seen = [], set()
    for _, entries in _parse(path, stamp):
        for de_synonyms, en_synonyms in entries:
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
        kind = "sentence-like " if sentence_like else ""
        raise ValueError(f"{path} holds no {kind}`German :: English` pairs.")
    return tuple(pairs)


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


def without_held_out(pairs, held_out):
    """`pairs` without any pair that shares a side with a `held_out` pair.

    Sides are compared by their words only (case, punctuation and spacing
    ignored), so `Das bleibt dir überlassen` is held out with
    `Das bleibt dir überlassen.`: use it to add the dictionary's word and
    phrase pairs to training without leaking a validation or test sentence.

    Example:
    >>> without_held_out([("Ja", "yes"), ("ja!", "yeah")], [("Ja.", "Yes.")])
    []
    """
    held_de = {_words(de) for de, _ in held_out}
    held_en = {_words(en) for _, en in held_out}
    return [
        (de, en)
        for de, en in pairs
        if _words(de) not in held_de and _words(en) not in held_en
    ]


def without_sentences(sentences, held_out):
    """`sentences` without any whose words equal a `held_out` sentence's.

    Case, punctuation and spacing are ignored, as in `without_held_out`:
    use it to keep the validation and test sentences' sides out of
    monolingual training text (back-translation, denoising).

    Example:
    >>> without_sentences(["Yes!", "No, thanks.", "no thanks"], ["No thanks."])
    ['Yes!']
    """
    held = {_words(sentence) for sentence in held_out}
    return [sentence for sentence in sentences if _words(sentence) not in held]


def _words(text):
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())
