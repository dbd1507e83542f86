"""The fortune cookie corpus (Debian's `fortunes`) as a topic-classification task.

Each file `/usr/share/games/fortunes/<category>` holds entries separated by a
line holding a single `%`; the category is the label. What is kept:

- Only the plain category files: `.dat` (indexes) and `.u8` files, hidden
  files and sub-folders (the offensive `off/` set) are skipped.
- Terminal overstriking (`X<backspace>X`, bold/underline) is removed and
  whitespace is collapsed, so an entry is one line of text.
- ASCII art is dropped: entries in which under 60% of the visible characters
  are letters (pictures, tables, code).
- Very long entries (more than `max_chars`, default 800 characters, about
  the longest 3%) are dropped: stories and song lyrics rather than fortunes.
- Texts found in more than one category are dropped from all of them (they
  cannot be classified, and would leak between splits); repeats within a
  category are kept once.
- Categories with fewer than `min_entries` (default 150) entries left are
  dropped, which keeps 27 categories and about 15,000 entries.

To turn the texts into batches see `keras_tfm.data.classification_dataset`.

As monolingual text (back-translation, denoising; German from Debian's
`fortunes-de` in `/usr/share/games/fortunes/de`), `fortune_sentences` splits
every entry into sentences, without its `-- Author` line.

The splits are stratified by category and seeded (scikit-learn's
`train_test_split`), so the same arguments give the same splits everywhere.
Licence: BSD (fortune-mod).
"""

import re
from pathlib import Path

import numpy as np

from keras_tfm.validation import check_positive_int

DEFAULT_ROOT = "/usr/share/games/fortunes"
_OVERSTRIKE = re.compile(r".\x08")
_SEPARATOR = re.compile(r"^%[ \t]*$", flags=re.MULTILINE)
# A sentence ends in . ! or ? before spaces and a capital (or a quote, a
# parenthesis, a dash before one); an attribution starts at the last " -- ".
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'„“‚(]?[A-ZÄÖÜ])")
_ATTRIBUTION = re.compile(r"\s--\s(?!.*\s--\s).*$")


def _missing(root, detail):
    return ValueError(
        f"No fortune files found in {root} ({detail}). Install Debian's "
        "`fortunes` package: `apt-get install -y fortunes` (as root), or pass "
        "`root=` pointing at a folder of fortune files."
    )


def _fortune_files(root):
    """The plain fortune files in `root` (no `.dat`/`.u8`, hidden, folders)."""
    if not root.is_dir():
        raise _missing(root, "the folder does not exist")
    files = sorted(
        p
        for p in root.iterdir()
        if p.is_file() and "." not in p.name and not p.name.startswith(".")
    )
    if not files:
        raise _missing(root, "the folder holds no fortune files")
    return files


def _is_ascii_art(entry, min_letter_share=0.6):
    visible = [c for c in entry if not c.isspace()]
    if not visible:
        return True
    return sum(c.isalpha() for c in visible) / len(visible) < min_letter_share


def read_fortune_file(path):
    """The cleaned entries of one fortune file (no filtering), as strings.

    Example:
    >>> entries = read_fortune_file("/usr/share/games/fortunes/fortunes")
    >>> len(entries) > 400
    True
    """
    raw = Path(path).read_text(encoding="utf-8", errors="replace")
    raw = _OVERSTRIKE.sub("", raw)
    return [" ".join(e.split()) for e in _SEPARATOR.split(raw) if e.strip()]


def load_fortunes(root=None, min_entries=150, max_chars=800, categories=None):
    """Reads and filters the fortunes (see the module docstring for the rules).

    Args:
        root: the folder of fortune files (default `/usr/share/games/fortunes`).
        min_entries: drop categories with fewer entries after filtering.
        max_chars: drop entries longer than this (after collapsing spaces).
        categories: optional list of category names to keep (before the
            `min_entries` rule).

    Returns:
        `(texts, labels, class_names)`: a list of strings, an int32 array of
        indices into `class_names` (the sorted category names).

    Example:
    >>> texts, labels, names = load_fortunes()
    >>> bool(len(texts) == len(labels) and len(names) == labels.max() + 1)
    True
    """
    root = Path(DEFAULT_ROOT if root is None else root)
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(
            f"`max_chars` must be a positive integer. Received: max_chars={max_chars!r}"
        )
    if not isinstance(min_entries, int) or min_entries < 1:
        raise ValueError(
            "`min_entries` must be a positive integer. "
            f"Received: min_entries={min_entries!r}"
        )
    files = _fortune_files(root)
    available = [p.name for p in files]
    if categories is not None:
        unknown = sorted(set(categories) - set(available))
        if unknown:
            raise ValueError(
                f"Unknown fortune categories {unknown}. Received: categories="
                f"{list(categories)}. Available in {root}: {available}"
            )
        files = [p for p in files if p.name in set(categories)]

    seen = {}  # text -> set of categories
    per_category = {}
    for path in files:
        kept = []
        for entry in read_fortune_file(path):
            if len(entry) > max_chars or _is_ascii_art(entry):
                continue
            if path.name in seen.setdefault(entry, set()):
                continue  # a repeat within the category
            seen[entry].add(path.name)
            kept.append(entry)
        per_category[path.name] = kept
    for name, entries in per_category.items():
        per_category[name] = [e for e in entries if len(seen[e]) == 1]
    class_names = sorted(n for n, e in per_category.items() if len(e) >= min_entries)
    if len(class_names) < 2:
        raise ValueError(
            f"Fewer than 2 fortune categories have at least min_entries="
            f"{min_entries} entries in {root}. Lower `min_entries`."
        )
    texts, labels = [], []
    for index, name in enumerate(class_names):
        texts.extend(per_category[name])
        labels.extend([index] * len(per_category[name]))
    return texts, np.asarray(labels, dtype="int32"), class_names


def fortune_splits(
    root=None,
    validation_fraction=0.1,
    test_fraction=0.1,
    seed=0,
    **load_kwargs,
):
    """Deterministic, stratified train/validation/test splits of the fortunes.

    Args:
        root: the folder of fortune files (see `load_fortunes`).
        validation_fraction: share of entries in the validation split.
        test_fraction: share of entries in the test split.
        seed: the split seed.
        **load_kwargs: `min_entries`, `max_chars`, `categories`.

    Returns:
        A dict with "train", "validation" and "test" (each `(texts, labels)`)
        and "class_names".

    Example:
    >>> splits = fortune_splits()
    >>> texts, labels = splits["test"]
    >>> len(texts) == len(labels)
    True
    """
    from sklearn.model_selection import train_test_split

    for name, value in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0 < value < 0.5:
            raise ValueError(f"`{name}` must be in (0, 0.5). Received: {name}={value}")
    texts, labels, class_names = load_fortunes(root, **load_kwargs)
    texts = np.asarray(texts, dtype=object)
    rest_x, test_x, rest_y, test_y = train_test_split(
        texts, labels, test_size=test_fraction, stratify=labels, random_state=seed
    )
    train_x, val_x, train_y, val_y = train_test_split(
        rest_x,
        rest_y,
        test_size=validation_fraction / (1 - test_fraction),
        stratify=rest_y,
        random_state=seed,
    )
    return {
        "train": (list(train_x), train_y),
        "validation": (list(val_x), val_y),
        "test": (list(test_x), test_y),
        "class_names": class_names,
    }


def split_sentences(text, min_words=3, max_words=20):
    """The sentences of `text` with `min_words` to `max_words` words.

    A fortune's `-- Author` attribution (from its last ` -- ` on) is cut off
    first. A sentence is kept when it starts with a capital letter, ends in
    `.`, `!` or `?`, and is not ASCII art (see the module docstring).

    Example:
    >>> split_sentences("Go away. I am busy! Not now -- Anon")
    ['I am busy!']
    >>> split_sentences("Wer A sagt, muss B sagen. Ja.", min_words=1)
    ['Wer A sagt, muss B sagen.', 'Ja.']
    """
    check_positive_int("min_words", min_words)
    check_positive_int("max_words", max_words)
    if max_words < min_words:
        raise ValueError(
            "`max_words` must be at least `min_words`. Received: "
            f"min_words={min_words}, max_words={max_words}"
        )
    text = _ATTRIBUTION.sub("", " ".join(text.split()))
    return [
        sentence
        for sentence in _SENTENCE_END.split(text)
        if min_words <= len(sentence.split()) <= max_words
        and sentence[0].isupper()
        and sentence[-1] in ".!?"
        and not _is_ascii_art(sentence)
    ]


def fortune_sentences(root=None, min_words=3, max_words=20):
    """The distinct sentences of every fortune file in `root`, in file order.

    Args:
        root: a folder of fortune files (default `/usr/share/games/fortunes`,
            English; `/usr/share/games/fortunes/de` for `fortunes-de`).
            `.dat` and `.u8` files, hidden files and sub-folders are skipped.
        min_words, max_words: see `split_sentences`.

    Returns:
        A list of strings, each sentence once.

    Example:
    >>> sentences = fortune_sentences()
    >>> len(sentences) > 10000
    True
    """
    root = Path(DEFAULT_ROOT if root is None else root)
    files = _fortune_files(root)
    sentences = {}
    for path in files:
        for entry in read_fortune_file(path):
            for sentence in split_sentences(entry, min_words, max_words):
                sentences.setdefault(sentence, None)
    return list(sentences)


# "zeal, n.: Quality seen in new graduates": a term, its part of speech, a
# colon, the definition (whitespace already collapsed).
_DEFINITION = re.compile(
    r"^([^:,]{1,40}), ?(?:n|v|vt|vi|adj|adv|pp|prep|interj|pron|conj)\.?:\s+(.+)$"
)


def fortune_definitions(root=None, max_chars=300):
    """The dictionary entries of the `definitions` fortune file, as
    (term, definition) pairs: "zeal, n.: Quality seen in new graduates"
    gives ("zeal", "Quality seen in new graduates"). Each term once (its
    first entry), the `-- Author` line removed, definitions longer than
    `max_chars` dropped; Ambrose Bierce's, Rich Hall's "Sniglets" and
    others', about 350 in all.

    Example:
    >>> pairs = fortune_definitions()
    >>> len(pairs) > 300, dict(pairs)["zeal"]
    (True, 'Quality seen in new graduates')
    """
    check_positive_int("max_chars", max_chars)
    path = Path(DEFAULT_ROOT if root is None else root) / "definitions"
    if not path.is_file():
        raise _missing(path.parent, "it has no `definitions` file")
    pairs = {}
    for entry in read_fortune_file(path):
        found = _DEFINITION.match(entry)
        if found is None:
            continue
        definition = _ATTRIBUTION.sub("", found[2]).strip()
        if 8 <= len(definition) <= max_chars:
            pairs.setdefault(found[1].strip().lower(), (found[1].strip(), definition))
    return list(pairs.values())
