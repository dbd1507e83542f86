import os

import pytest

from keras_tfm.baselines import DictionaryTranslator
from keras_tfm.datasets.trans_de_en import TRANS_DE_EN_PATH

PAIRS = [
    ("ich", "I"),
    ("habe", "have"),
    ("haben", "to have"),
    ("einen", "a"),
    ("Hund", "dog"),
    ("Hund", "hound"),  # a later synonym: the first entry wins
    ("der", "the"),
    ("große Hund", "the big dog"),  # a phrase: ignored
]


def test_word_by_word_with_punctuation():
    translator = DictionaryTranslator(PAIRS)
    assert translator("Ich habe einen Hund.") == "I have a dog."
    assert translator(["Haben Sie einen Hund?"]) == ["Have Sie a dog?"]


def test_unknown_words_and_numbers_are_kept():
    translator = DictionaryTranslator(PAIRS)
    assert translator.translate("Ich habe 3 Katzen, Anna!") == "I have 3 Katzen, Anna!"


def test_phrases_are_not_entries():
    translator = DictionaryTranslator(PAIRS)
    assert "große" not in translator.lexicon
    assert translator.translate("der große Hund") == "The große dog"


def test_an_empty_lexicon_is_refused():
    with pytest.raises(ValueError, match="no single-word pair"):
        DictionaryTranslator([("große Hund", "the big dog")])


def test_the_real_dictionary():
    if not os.path.isfile(TRANS_DE_EN_PATH):
        pytest.skip(
            "needs the trans-de-en Debian package (apt-get install -y trans-de-en)"
        )
    translator = DictionaryTranslator.from_trans_de_en()
    assert len(translator.lexicon) > 50_000
    assert translator.lexicon["Hund"] == "dog"


def test_a_headword_beats_a_later_synonym(tmp_path):
    dictionary = tmp_path / "de-en"
    dictionary.write_text(
        "# header line\n"
        "Förderwagen {m}; Hund {m} [min.] | Förderwagen {pl} :: mine car | mine cars\n"
        "Hund {m} [zool.] | Hunde {pl} :: dog; dawg | dogs\n"
        "gehen {vi} :: to go; to walk\n",
        encoding="utf-8",
    )
    translator = DictionaryTranslator.from_trans_de_en(dictionary)
    assert translator.lexicon["Hund"] == "dog"
    assert translator.lexicon["Förderwagen"] == "mine car"
    assert translator.translate("Hunde gehen?") == "Dogs go?"
