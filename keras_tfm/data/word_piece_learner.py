"""A fast WordPiece vocabulary learner (HuggingFace `tokenizers`, in Rust)."""


def learn_word_piece_vocabulary(
    texts, vocabulary_size, lowercase, strip_accents, reserved_tokens
):
    """A WordPiece vocabulary for keras-hub's `WordPieceTokenizer`, learned by
    HuggingFace's `WordPieceTrainer` (BPE merges written as word pieces).

    keras-hub's `compute_word_piece_vocabulary` (BERT's bottom-up learner,
    pure Python) takes minutes on a corpus of a million words; this takes
    seconds. The text is split as keras-hub splits it (whitespace, then
    punctuation as separate tokens), continuations carry the "##" prefix,
    and the reserved tokens come first in the order given.

    Args:
        texts: a list of strings.
        vocabulary_size: the most tokens to learn, reserved ones included.
        lowercase: lowercase the text before learning.
        strip_accents: drop accents before learning.
        reserved_tokens: tokens placed first in the vocabulary.

    Returns:
        The vocabulary, a list of strings in id order.

    Example:
    >>> learn_word_piece_vocabulary(
    ...     ["the cat sat", "the cat sat on the mat"], 30, False, False,
    ...     ["[PAD]", "[UNK]"])[:2]
    ['[PAD]', '[UNK]']
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    learner = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    learner.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=strip_accents,
        lowercase=lowercase,
    )
    learner.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        special_tokens=list(reserved_tokens),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    learner.train_from_iterator(texts, trainer)
    by_id = sorted(learner.get_vocab().items(), key=lambda item: item[1])
    return [token for token, _ in by_id]
