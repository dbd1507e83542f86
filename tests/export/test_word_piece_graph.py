"""The in-graph WordPiece rejoin gives `keras_tfm.data.detokenize`'s text."""

import itertools

import tensorflow as tf

from keras_tfm.data import detokenize, join_word_pieces
from keras_tfm.datasets import trans_de_en
from keras_tfm.export import word_piece_graph
from tests.data.test_detokenization import (
    MORE_SENTENCES,
    SENTENCES,
    ZOO,
    word_piece,
)

# Token sequences the spacing rules treat specially, beyond what the
# sentences hold: nested and unmatched quotes, a closing ’ nothing opened,
# "sb./sth.", a spaced "/", a dash, a suspended hyphen, numbers with . , :,
# an elision, and "##" pieces after punctuation (they start a word).
EDGE_TOKENS = [
    ["„", "Er", "sagte", ":", "'", "nein", "'", "“", "."],
    ["the", "dogs", "'", "bones", "and", "months", "’", "pay"],
    ["sb", ".", "/", "sth", ".", "a", "/", "b", "–", "c"],
    ["Speise", "-", "und", "Weinkarte", ",", "3", ".", "5", ",", "10", ":", "30"],
    ["o", "'", "clock", "(", "a", ")", "$", "5", "¿", "Qué", "?", "«", "x", "»"],
    [".", "##a", "##b", "x", "##y", "-", "##z", "\"", "“", "”", "\""],
]


def dictionary_sentences(every=20):
    """Sentences of the translator's data source (trans-de-en), both sides:
    every `every`-th line's sentence-like alternatives, without parsing."""
    texts = set()
    for line in itertools.islice(trans_de_en.dictionary_lines(), 0, None, every):
        if " :: " not in line:
            continue
        for side in line.strip().split(" :: "):
            for text in side.replace(" | ", "; ").split("; "):
                if trans_de_en.is_sentence_like(text, 4) and "{" not in text:
                    texts.add(text)
    return sorted(texts)


def test_the_graph_rejoin_equals_python_on_the_translators_sentences():
    tokenizer = word_piece(
        ZOO / "translator_de_en/assets/tokenizer/vocabulary.txt",
        lowercase=False,
        strip_accents=False,
        special_tokens=["[PAD]", "[START]", "[END]"],
    )
    texts = SENTENCES + MORE_SENTENCES + dictionary_sentences()
    assert len(texts) > 1000
    rows = [[int(i) for i in row] for row in tokenizer(texts)]
    vocabulary = tokenizer.get_vocabulary()
    start, end = vocabulary.index("[START]"), vocabulary.index("[END]")
    rows.append([start] + rows[0] + [end, 0, 0])  # special tokens are dropped
    graph = tf.function(lambda ids: word_piece_graph.detokenize(tokenizer, ids))
    got = [text.decode("utf-8") for text in graph(tf.ragged.constant(rows)).numpy()]
    expected = detokenize(tokenizer, rows)
    assert [(g, e) for g, e in zip(got, expected, strict=True) if g != e] == []
    assert got[0] == SENTENCES[0]


def test_the_spacing_rules_equal_python_on_edge_cases():
    words = word_piece_graph.merge_suffixes(tf.ragged.constant(EDGE_TOKENS))
    assert [w.decode() for w in words.to_list()[5]] == [
        ".", "ab", "xy", "-", "z", '"', "“", "”", '"'
    ]  # fmt: skip
    texts = word_piece_graph.join_words(words).numpy()
    assert [t.decode() for t in texts] == [join_word_pieces(t) for t in EDGE_TOKENS]


def test_the_export_helpers_docstring_examples_run():
    import doctest

    from keras_tfm.export import decoding

    for module in (decoding, word_piece_graph):
        result = doctest.testmod(module, extraglobs={"tf": tf})
        assert result.attempted > 0 and result.failed == 0, module.__name__
