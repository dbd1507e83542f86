"""Spanish-English verse pairs from two SWORD Bibles (Debian packages).

`sword-text-sparv` installs the Reina-Valera 1909 (Spanish, `spaRV1909eb`)
and `sword-text-web` the World English Bible (`engWEB2015eb`) under
`/usr/share/sword`; both are in the public domain and are read where they
are installed with `pysword` (PyPI), never copied into this repository.
They share the KJV versification, so verse `book chapter:verse` of one is
that verse of the other: 31,076 pairs with text on both sides in the 66
books both hold (a verse empty on either side, e.g. Matthew 17:21 that the
WEB leaves out, is dropped).

The texts are OSIS markup. `clean_verse` keeps only what is read aloud:

- a `<note>...</note>` (a translator's footnote or cross-reference) is
  removed with its text and replaced by a space, since the markup glues it
  to the words around it: pysword's own `clean=True` gives "his only
  bornSon" for John 3:16, this gives "his only born Son";
- a `<transChange>` (words the translator added, "se llamaba"), `<div>`,
  `<milestone>` or line tag becomes a space, for the same reason; every
  other tag (`<w lemma=...>`, `<q>`, ...) is removed, its text kept;
  character entities are decoded;
- spaces are collapsed, and a space before closing punctuation dropped.

Whole books are held out, so that no test verse has a near-duplicate (a
parallel passage of the same book) in training: `TEST_BOOKS` (Ruth, Jonah,
Philippians, James, 1 John; 449 verses) and `VALIDATION_BOOKS` (Esther,
Micah, Colossians; 367 verses). From training (only) `split_parallel_verses`
drops the 12 pairs whose sides do not say the same thing (see `_aligned`):
verse boundaries that differ, e.g. Numbers 13:2, and the WEB's colophon
appended to Revelation 22:21. The held-out books stay whole: test keeps 1
John 5:7, which the Reina-Valera gives with the Trinitarian clause that the
WEB leaves out.
"""

import functools
import html
import re
from collections import namedtuple

SWORD_PATH = "/usr/share/sword"
SPANISH_MODULE = "spaRV1909eb"  # Debian package sword-text-sparv
ENGLISH_MODULE = "engWEB2015eb"  # Debian package sword-text-web
PACKAGES = {SPANISH_MODULE: "sword-text-sparv", ENGLISH_MODULE: "sword-text-web"}
# OSIS book names, as the modules' versification lists them.
TEST_BOOKS = ("Ruth", "Jonah", "Phil", "Jas", "1John")
VALIDATION_BOOKS = ("Esth", "Mic", "Col")

ParallelVerse = namedtuple(
    "ParallelVerse", ["book", "chapter", "verse", "spanish", "english"]
)

_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.DOTALL)
_EMPTY_NOTE = re.compile(r"<note\b[^>]*/>")
# Tags between words: the WEB glues "se llamaba" to its neighbours inside
# <transChange>, a paragraph <div/> to the next verse's first word.
_SPACING_TAG = re.compile(r"</?(?:transChange|div|milestone|lb|l|lg|title)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE = re.compile(r" ([.,;:!?)\]”’»])")
_SPACE_AFTER = re.compile(r"([(\[“«¿¡]) ")


def clean_verse(markup):
    """The plain text of one verse of OSIS markup (see the module docstring).

    Example:
    >>> clean_verse('<w lemma="strong:G3439">only</w> born</q><note '
    ...     'placement="foot">The phrase “only born” ...</note><q><w>Son</w>, ')
    'only born Son,'
    """
    text = _EMPTY_NOTE.sub(" ", _NOTE.sub(" ", markup))
    text = html.unescape(_TAG.sub("", _SPACING_TAG.sub(" ", text)))
    text = " ".join(text.split())
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))


def _module(modules, name):
    bible = modules.get_bible_from_module(name)
    # pysword decompresses a verse's whole block for each verse; reading a
    # book verse by verse then takes minutes. Keep the last blocks.
    bible._decompressed_text = functools.lru_cache(maxsize=8)(bible._decompressed_text)
    return bible


def _open_modules(path):
    try:
        from pysword.modules import SwordModules
    except ImportError:
        raise ValueError(
            "Reading SWORD Bibles needs `pysword`: `pip install pysword` "
            "(or keras-tfm's `examples` extra). Received: no pysword module"
        ) from None
    try:
        found = SwordModules(path).parse_modules()
    except (FileNotFoundError, OSError):
        found = {}
    missing = [PACKAGES[name] for name in PACKAGES if name not in found]
    if missing:
        raise ValueError(
            f"The SWORD modules {', '.join(PACKAGES)} are needed under {path}: "
            f"`apt-get install -y {' '.join(missing)}`. Received: "
            f"path={path!r} holding {sorted(found) or 'no module'}"
        )
    return SwordModules(path)


def _verses(bible, books):
    """{(book, chapter, verse): markup} of `books` by the module's own
    versification (the WEB's counts differ from the Spanish one's in a few
    chapters, e.g. 3 John)."""
    found = bible.get_structure().get_books()
    text = {}
    for book in found["ot"] + found["nt"]:
        if book.osis_name not in books:
            continue
        references = [
            (book.osis_name, chapter, verse)
            for chapter, length in enumerate(book.chapter_lengths, 1)
            for verse in range(1, length + 1)
        ]
        markup = bible.get_iter(books=[book.osis_name], clean=False)
        text.update(zip(references, markup, strict=True))
    return text


def _aligned(spanish, english):
    """False for a pair whose sides cannot be translations of each other:
    more than 20 words on one side and over three times as many as on the
    other. Verse boundaries that differ between the two Bibles (Numbers 13:2
    is Spanish "Y Jehová habló á Moisés, diciendo:" beside the WEB's 36
    words) and the WEB's colophon after Revelation 22:21 (3,045 words)."""
    lengths = sorted((len(spanish.split()), len(english.split())))
    return lengths[1] <= 20 or lengths[1] <= 3 * lengths[0]


@functools.lru_cache(maxsize=4)
def _load(path, books):
    modules = _open_modules(path)
    modules.parse_modules()
    spanish, english = (_module(modules, n) for n in (SPANISH_MODULE, ENGLISH_MODULE))
    found = spanish.get_structure().get_books()
    names = [book.osis_name for book in found["ot"] + found["nt"]]
    unknown = sorted(set(books or ()) - set(names))
    if unknown:
        raise ValueError(
            f"`books` must be OSIS names of the Bible's books, e.g. {names[:3]}. "
            f"Received: {unknown}"
        )
    books = [name for name in names if books is None or name in books]
    spanish, english = _verses(spanish, books), _verses(english, books)
    verses = []
    for reference, markup in spanish.items():  # canonical order
        es, en = clean_verse(markup), clean_verse(english.get(reference, ""))
        if es and en:
            verses.append(ParallelVerse(*reference, es, en))
    return tuple(verses)


def load_parallel_verses(path=SWORD_PATH, books=None):
    """Every verse with text in both Bibles, in canonical order.

    Args:
        path: the SWORD folder holding `mods.d` and `modules`.
        books: OSIS book names to read (e.g. `TEST_BOOKS`), or None for all.

    Returns:
        A list of `ParallelVerse(book, chapter, verse, spanish, english)`,
        `book` an OSIS name such as "John".

    Raises:
        ValueError: if `pysword` or either module is missing (the message
            names the package to install).

    Example:
    >>> verses = load_parallel_verses()  # doctest: +SKIP
    >>> [v for v in verses if (v.book, v.chapter, v.verse) == ("John", 3, 16)]
    ... # doctest: +SKIP
    [ParallelVerse(book='John', chapter=3, verse=16, spanish='Porque de tal
    manera amó Dios al mundo, ...', english='For God so loved the world, ...')]
    """
    if isinstance(books, str):
        books = (books,)
    return list(_load(str(path), None if books is None else tuple(books)))


def split_parallel_verses(verses):
    """`(train, validation, test)` lists of `(spanish, english)` pairs.

    Test: the books of `TEST_BOOKS`; validation: `VALIDATION_BOOKS`;
    training: every other book, without the pairs whose sides differ too
    much in length to be translations of each other (`_aligned`). Order is
    canonical (shuffle for training).

    Args:
        verses: `ParallelVerse`s, e.g. from `load_parallel_verses`.

    Example:
    >>> verses = [ParallelVerse("Gen", 1, 1, "En el principio", "In the beginning"),
    ...           ParallelVerse("Ruth", 1, 1, "Y aconteció", "It happened"),
    ...           ParallelVerse("Col", 1, 1, "Pablo", "Paul")]
    >>> train, validation, test = split_parallel_verses(verses)
    >>> train, validation, test
    ([('En el principio', 'In the beginning')], [('Pablo', 'Paul')],
     [('Y aconteció', 'It happened')])
    """
    splits = {"train": [], "validation": [], "test": []}
    for verse in verses:
        if not isinstance(verse, ParallelVerse):
            raise ValueError(
                "`verses` must hold ParallelVerse tuples. Received: "
                f"{type(verse).__name__} {verse!r:.60}"
            )
        split = (
            "test"
            if verse.book in TEST_BOOKS
            else "validation"
            if verse.book in VALIDATION_BOOKS
            else "train"
        )
        if split == "train" and not _aligned(verse.spanish, verse.english):
            continue
        splits[split].append((verse.spanish, verse.english))
    return splits["train"], splits["validation"], splits["test"]
