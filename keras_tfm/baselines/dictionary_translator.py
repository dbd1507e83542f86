"""Word-by-word translation with a bilingual dictionary: the simplest baseline."""

import re

_WORD_OR_SYMBOL = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]", re.UNICODE)
_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}»“”])")
_SPACE_AFTER = re.compile(r"([(\[{«„]) ")


class DictionaryTranslator:
    """Translates each word by its first dictionary entry; keeps unknown words.

    Built from single-word pairs only (no phrase or sentence), so it knows no
    word order, inflection or idiom: the floor a trained translator has to
    clear. Lookup is by the exact word, then by its lower-case form; the
    first pair listed for a word wins; English infinitives lose their "to".
    The first word of a text is looked up lower-case first, and its
    translation capitalized.

    Args:
        word_pairs: iterable of `(source_word, target_text)` string pairs.

    Example:
    >>> translator = DictionaryTranslator(
    ...     [("ich", "I"), ("habe", "have"), ("einen", "a"), ("Hund", "dog")])
    >>> translator.translate("Ich habe einen Hund.")
    'I have a dog.'
    """

    def __init__(self, word_pairs):
        self.lexicon = {}
        for source, target in word_pairs:
            if " " in source.strip() or not target.strip():
                continue
            target = target.strip()
            if target.startswith("to ") and len(target.split()) == 2:
                target = target[3:]
            self.lexicon.setdefault(source.strip(), target)
        if not self.lexicon:
            raise ValueError(
                "`word_pairs` holds no single-word pair. Received an empty lexicon."
            )

    @classmethod
    def from_trans_de_en(cls, path=None):
        """The German -> English lexicon of Debian's `trans-de-en` word entries.

        A word's entry is the first English synonym of the line where the
        word comes earliest among the German synonyms (a headword beats a
        synonym listed fifth; "Hund" is "dog", not "mine car"), earlier
        sub-entries and lines first.
        """
        from keras_tfm.datasets.trans_de_en import parsed_dictionary

        ranked = {}
        for line_number, entries in parsed_dictionary(path):
            for entry_index, (german, english) in enumerate(entries):
                for synonym_index, word in enumerate(german):
                    rank = (synonym_index, entry_index, line_number)
                    if " " in word or (word in ranked and rank >= ranked[word][0]):
                        continue
                    ranked[word] = (rank, english[0])
        pairs = sorted((rank, word, target) for word, (rank, target) in ranked.items())
        return cls((word, target) for _, word, target in pairs)

    def _word(self, word, sentence_initial=False):
        if not word[0].isalnum():  # punctuation is kept, never looked up
            return word
        # A sentence-initial capital says nothing: "Ich" is "ich", not "ego".
        forms = (word.lower(), word) if sentence_initial else (word, word.lower())
        return next((self.lexicon[f] for f in forms if f in self.lexicon), word)

    def translate(self, text):
        """The word-by-word translation of one string."""
        words = _WORD_OR_SYMBOL.findall(text)
        tokens = [self._word(w, sentence_initial=i == 0) for i, w in enumerate(words)]
        if tokens and tokens[0][:1].islower():
            tokens[0] = tokens[0][:1].upper() + tokens[0][1:]
        joined = " ".join(tokens)
        return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", joined))

    def __call__(self, texts):
        """Translates a string or a list of strings."""
        if isinstance(texts, str):
            return self.translate(texts)
        return [self.translate(t) for t in texts]
