"""Learning a byte-level BPE vocabulary (GPT-2's kind) for a causal LM."""

import json

import keras_hub

from keras_tfm.validation import check_int_at_least

END_OF_TEXT = "<|endoftext|>"


def train_byte_pair_tokenizer(
    texts, vocabulary_size, special_tokens=(END_OF_TEXT,), name="byte_pair_tokenizer"
):
    """A keras-hub `BytePairTokenizer` whose merges are learned on `texts`.

    Byte-level BPE (GPT-2's scheme) is lossless: every string, seen or not,
    tokenizes and detokenizes back to itself, so a language model's loss on
    its tokens converts exactly into nats per byte. The special tokens come
    first, so with the default `"<|endoftext|>"` is id 0, the `padding_id` of
    `CausalLM`, and never occurs in text. Train it on the training split only.

    Args:
        texts: a list of strings (e.g. the training text's lines, newlines kept).
        vocabulary_size: the vocabulary's size: the 256 bytes, the special
            tokens and the learned merges.
        special_tokens: tokens placed first in the vocabulary.
        name: the tokenizer layer's name (its asset folder in a preset).

    Returns:
        A `keras_hub.tokenizers.BytePairTokenizer`.

    Example:
    >>> tokenizer = train_byte_pair_tokenizer(
    ...     ["the cat sat\\n", "the dog sat on the cat\\n"], vocabulary_size=270)
    >>> tokenizer.token_to_id("<|endoftext|>")
    0
    >>> tokenizer.detokenize(tokenizer("the cow sat"))
    'the cow sat'
    """
    # keras-hub has no BPE learner; HuggingFace `tokenizers` (a keras-hub
    # dependency) learns GPT-2's vocabulary and merges, which keras-hub reads.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    smallest = len(alphabet) + len(special_tokens)
    check_int_at_least(
        "vocabulary_size", vocabulary_size, smallest,
        "an integer of at least 256 + the number of special tokens "
        f"({smallest}): every byte is a token",
    )  # fmt: skip
    if isinstance(texts, str):
        raise ValueError(
            "`texts` must be a list of strings, not one string. "
            f"Received: texts={texts[:40]!r}..."
        )
    texts = [text for text in texts if text]
    if not texts:
        raise ValueError("`texts` must hold some non-empty text. Received: none.")
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    learner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        initial_alphabet=alphabet,
        special_tokens=list(special_tokens),
        show_progress=False,
    )
    learner.train_from_iterator(texts, trainer)
    learned = json.loads(learner.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in learned["merges"]]
    return keras_hub.tokenizers.BytePairTokenizer(
        vocabulary=learned["vocab"],
        merges=merges,
        unsplittable_tokens=list(special_tokens),
        name=name,
    )
