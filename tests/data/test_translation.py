"""The trans-de-en loader: parsing, sentence filter, leak-free split, pipeline."""

import os

import numpy as np
import pytest

from keras_tfm.data import translation
from keras_tfm.datasets import trans_de_en

DICTIONARY = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later
Aalsuppe {f} [cook.] | Aalsuppen {pl} :: eel soup | eel soups
Das ist doch nicht möglich. :: That really isn't possible.
Haben Sie etwas gegen Sonnenbrand? :: Have you anything for sunburn?
Auf Ihre Gesundheit!; Auf Ihr Wohl! :: Here's to you all!
Zwei Teile | nur ein Teil :: two parts
Er kommt (bald) wieder. [ugs.] | Sie geht. :: He will (surely) come back. | She goes.
kein Trenner hier
Wie spät ist es jetzt? :: What time is it now?
Wie spät ist es jetzt? :: What's the time now?
Ich habe keine Zeit. :: I have no time.
Wir sehen uns morgen. :: See you tomorrow.
"""


@pytest.fixture
def dictionary(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(DICTIONARY, encoding="utf-8")
    return path


def test_strip_annotations_removes_all_label_kinds():
    assert trans_de_en.strip_annotations("Aal {m} (auf der Speisekarte) [cook.]") == (
        "Aal"
    )
    assert trans_de_en.strip_annotations("eel <eelsmoking> (a (nested) one) x .") == (
        "eel x."
    )
    # Without labels (the common case, which skips the label pattern) the
    # spaces are still collapsed and the space before punctuation removed.
    assert trans_de_en.strip_annotations("  Wie\t spät   ist es ?  ") == (
        "Wie spät ist es?"
    )
    assert trans_de_en.strip_annotations(" Aal\n") == "Aal"


def test_parse_dictionary_line_edge_cases():
    assert trans_de_en.parse_dictionary_line("# License :: GPL") == []
    assert trans_de_en.parse_dictionary_line("no separator") == []
    assert trans_de_en.parse_dictionary_line("Zwei | eins :: two") == []  # 2 vs 1
    assert trans_de_en.parse_dictionary_line(
        "Aalsuppe {f} [cook.] | Aalsuppen {pl} :: eel soup | eel soups"
    ) == [(("Aalsuppe",), ("eel soup",)), (("Aalsuppen",), ("eel soups",))]
    assert trans_de_en.parse_dictionary_line(
        "Auf Ihre Gesundheit!; Auf Ihr Wohl! :: Here's to you!"
    ) == [(("Auf Ihre Gesundheit!", "Auf Ihr Wohl!"), ("Here's to you!",))]


def test_load_keeps_sentence_like_pairs_only(dictionary):
    pairs = trans_de_en.load_translation_pairs(dictionary)
    assert ("Das ist doch nicht möglich.", "That really isn't possible.") in pairs
    # Synonyms are paired; labels stripped inside sub-entries; the short
    # "Sie geht." / "She goes." (2 words) is not sentence-like.
    assert ("Auf Ihr Wohl!", "Here's to you all!") in pairs
    assert ("Er kommt wieder.", "He will come back.") in pairs
    assert not any("Aal" in de or "geht" in de or "Zwei" in de for de, _ in pairs)
    assert len(pairs) == len(set(pairs)) == 9
    everything = trans_de_en.load_translation_pairs(dictionary, sentence_like=False)
    assert ("Aalsuppen", "eel soups") in everything and len(everything) > len(pairs)


def test_loaded_pairs_are_the_files_own_and_the_callers_to_change(dictionary):
    pairs = trans_de_en.load_translation_pairs(dictionary)
    pairs.clear()  # the caller's copy
    assert len(trans_de_en.load_translation_pairs(dictionary)) == 9
    # A new version of the file is read again, not served from memory.
    text = DICTIONARY + "Ich lese ein Buch. :: I am reading a book.\n"
    dictionary.write_text(text, encoding="utf-8")
    os.utime(dictionary, ns=(0, 10**18))  # a different modification time
    pairs = trans_de_en.load_translation_pairs(dictionary)
    assert ("Ich lese ein Buch.", "I am reading a book.") in pairs
    assert len(pairs) == 10


def test_the_pairs_and_the_lexicon_share_one_parse_per_file_version(
    dictionary, monkeypatch
):
    from keras_tfm.baselines import DictionaryTranslator

    parsed = []
    parse = trans_de_en.parse_dictionary_line
    monkeypatch.setattr(
        trans_de_en,
        "parse_dictionary_line",
        lambda line: parsed.append(line) or parse(line),
    )
    trans_de_en.load_translation_pairs(dictionary)
    trans_de_en.load_translation_pairs(dictionary, sentence_like=False)
    translator = DictionaryTranslator.from_trans_de_en(dictionary)
    assert len(parsed) == len(DICTIONARY.splitlines())  # each line once
    assert translator.lexicon["Aalsuppe"] == "eel soup"
    dictionary.write_text(DICTIONARY + "Buch {n} :: book\n", encoding="utf-8")
    os.utime(dictionary, ns=(0, 10**18))  # a new version of the file
    assert DictionaryTranslator.from_trans_de_en(dictionary).lexicon["Buch"] == "book"
    assert len(parsed) == 2 * len(DICTIONARY.splitlines()) + 1


def test_missing_file_names_the_debian_package(tmp_path):
    with pytest.raises(ValueError, match="trans-de-en"):
        trans_de_en.load_translation_pairs(tmp_path / "absent")
    with pytest.raises(ValueError, match="min_words"):
        trans_de_en.load_translation_pairs(tmp_path, min_words=0)


def test_split_is_deterministic_and_never_leaks(dictionary):
    pairs = trans_de_en.load_translation_pairs(dictionary)
    pairs += [
        (f"Satz Nummer {i} hier.", f"Sentence number {i} here.") for i in range(200)
    ]
    splits = trans_de_en.split_translation_pairs(pairs, 0.2, 0.2, seed=3)
    assert splits == trans_de_en.split_translation_pairs(pairs, 0.2, 0.2, seed=3)
    assert splits != trans_de_en.split_translation_pairs(pairs, 0.2, 0.2, seed=4)
    assert sorted(sum(splits, [])) == sorted(pairs)
    assert 30 < len(splits[1]) < 55 and 30 < len(splits[2]) < 55
    # Pairs sharing a German or an English sentence stay in one split.
    for side in (0, 1):
        owners = [{pair[side] for pair in split} for split in splits]
        assert not (owners[0] & owners[1] or owners[0] & owners[2])
        assert not owners[1] & owners[2]
    with pytest.raises(ValueError, match="test_fraction"):
        trans_de_en.split_translation_pairs(pairs, 0.5, 0.5)
    with pytest.raises(ValueError, match="validation_fraction"):
        trans_de_en.split_translation_pairs(pairs, -0.1)


def test_word_and_phrase_pairs_without_held_out_sentences(dictionary):
    every = trans_de_en.load_translation_pairs(dictionary, sentence_like=False)
    held_out = [("Ich habe keine Zeit.", "I have no time.")]
    extra = [
        ("ich habe keine Zeit", "no time for you"),  # German side: held out
        ("keine Zeit", "I have NO time!"),  # English side: held out
        ("Ich habe keine Zeit mehr.", "I have no time left."),  # a neighbour
    ]
    kept = trans_de_en.without_held_out(every + extra, held_out)
    assert kept == [p for p in every if p not in held_out] + extra[2:]
    assert trans_de_en.without_held_out(every, []) == every


def test_monolingual_sentences_without_held_out_ones():
    held_out = ["I have no time.", "Wo ist der Bahnhof?"]
    sentences = [
        "i have NO time!",  # the same words: dropped
        "I have no time left.",  # a neighbour: kept
        "Wo ist  der Bahnhof",  # spacing and punctuation ignored: dropped
        "Wo ist der Zug?",
    ]
    kept = trans_de_en.without_sentences(sentences, held_out)
    assert kept == ["I have no time left.", "Wo ist der Zug?"]
    assert trans_de_en.without_sentences(sentences, []) == sentences


def test_tokenizer_and_teacher_forced_batches_by_length(dictionary):
    pairs = trans_de_en.load_translation_pairs(dictionary)
    tokenizer = translation.train_translation_tokenizer(
        [s for pair in pairs for s in pair], 200
    )
    ids = [tokenizer.token_to_id(t) for t in translation.SPECIAL_TOKENS]
    assert ids == [0, 1, 2, 3]
    dataset = translation.translation_dataset(
        pairs, tokenizer, batch_size=2, max_length=64, bucket_boundaries=(40,)
    )
    batches = list(dataset)
    assert len(batches) == int(dataset.cardinality())
    seen = 0
    for x, y in batches:
        source, target, labels = (
            x["source_ids"].numpy(),
            x["target_ids"].numpy(),
            y.numpy(),
        )
        assert source.shape[1] == target.shape[1] == labels.shape[1] in (40, 64)
        for t, label in zip(target, labels, strict=True):
            n = int((label != 0).sum())
            assert t[0] == 2 and label[n - 1] == 3  # [START] ... / ... [END]
            np.testing.assert_array_equal(t[1:n], label[: n - 1])
        seen += len(source)
    assert seen == len(pairs)
    # A token budget: the short bucket's batches hold 64 // 16 = 4 pairs.
    words = [(f"Wort{i}", f"word{i}") for i in range(9)]
    dataset = translation.translation_dataset(
        pairs + words, tokenizer, 1, 64, bucket_boundaries=(16,), tokens_per_batch=64
    )
    shapes = sorted(x["source_ids"].shape.as_list() for x, _ in dataset)
    assert len(shapes) == int(dataset.cardinality())
    assert sum(rows for rows, _ in shapes) == len(pairs) + len(words)
    assert max(rows for rows, length in shapes if length == 16) == 4
    assert {rows for rows, length in shapes if length == 64} <= {1}
    # Shuffled: each pass draws new batches of the same pairs.
    dataset = translation.translation_dataset(
        pairs + words, tokenizer, 1, 64, True, 0, (16,), tokens_per_batch=64
    )
    passes = [[y.numpy().tolist() for _, y in dataset] for _ in range(2)]
    assert passes[0] != passes[1]
    rows = [sorted(map(str, (r for b in p for r in b))) for p in passes]
    assert rows[0] == rows[1]
    with pytest.raises(ValueError, match="batch_size"):
        translation.translation_dataset(pairs, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="max_length"):
        translation.translation_dataset(pairs, tokenizer, 2, max_length=2)
    with pytest.raises(ValueError, match="vocabulary_size"):
        translation.train_translation_tokenizer(["a b c."], 4)


def test_detokenize_text_rejoins_punctuation():
    assert translation.detokenize_text("That really isn ' t possible .") == (
        "That really isn't possible."
    )
    assert (
        translation.detokenize_text(b"Wie sp\xc3\xa4t ist es ?") == "Wie spät ist es?"
    )
