"""Token ids back to text that reads like text.

keras-hub's `WordPieceTokenizer` splits every punctuation mark into a token
of its own and forgets where the spaces were; its `detokenize` then puts a
space between all word-level tokens: "I've a dog." comes back as
"I ' ve a dog .". `join_word_pieces` puts the spaces back where written
English and German have them. Hand-written because the field's versions do
not fit WordPiece output: HuggingFace's `clean_up_tokenization` only knows
English contractions (no quotes, hyphens, numbers, German), and Moses'
detokenizer (sacremoses) expects Moses tokens, where an apostrophe stays
attached ("'ve"), not WordPiece's bare "'".
"""

import keras_hub
import numpy as np

from keras_tfm._optional import python_ids

# Attached to the token before them: "dog.", "yes,", "50%", "(a)".
_CLOSING = set(".,!?;:%)]}…")
# Attached to the token after them: "(a)", "$5", "¿Qué?".
_OPENING = set("([{$¿¡")
_APOSTROPHES = set("'’")
# What follows an apostrophe inside a word: it's, isn't, I've, we're, I'll,
# I'd, I'm; German geht's, hab's.
_CONTRACTIONS = {"s", "t", "ve", "re", "ll", "d", "m"}
# A straight quote closes the same mark; curly ones close their partner
# (English “…”, German „…“, French «…», German »…«).
# German words after a suspended hyphen: "Speise- und Weinkarte".
_AFTER_SUSPENDED_HYPHEN = {"und", "oder", "bzw", "sowie", "bis"}
_CLOSES = {'"': '"', "“": "”", "„": "“", "«": "»", "»": "«", "‘": "’", "‚": "‘"}


def _is_word(token):
    return token is not None and token[:1].isalnum()


def _merge_suffixes(tokens, suffix_indicator):
    words = []
    for token in tokens:
        if suffix_indicator and token.startswith(suffix_indicator):
            piece = token[len(suffix_indicator) :]
            if words and _is_word(words[-1]):
                words[-1] += piece
                continue
            token = piece
        if token:
            words.append(token)
    return words


def join_word_pieces(tokens, suffix_indicator="##"):
    """Joins WordPiece tokens into text, spaced as English and German write it.

    Pieces that start with `suffix_indicator` join the word before them.
    Then, between word-level tokens:

    - no space before `. , ! ? ; : % ) ] } …`, none after `( [ { $ ¿ ¡`;
    - an apostrophe between a word and `s t ve re ll d m` is a contraction
      (`I've`, `isn't`, `geht's`), as after a one-letter elision (`o'clock`,
      `l'eau`); any other straight `'` is a single quote, any other `’`
      closes a `‘` or ends a word (`six months’ pay`);
    - quotes (`"…"`, `“…”`, `„…“`, `«…»`, `'…'`) open and close in turn:
      an opening quote attaches to the next token, a closing one to the
      previous;
    - `-` and `/` between two words join them (`well-known`, `and/or`),
      except a German suspended hyphen (`Speise- und Weinkarte`); the dash
      `–` keeps its spaces;
    - `.`, `,` and `:` between digits are part of the number (`3.5`,
      `3,5`, `1,000`, `1.000`, `10:30`).

    Spacing that the tokens do not determine is guessed: a plural possessive
    with a straight apostrophe (`the dogs' bones`) reads as an opening quote,
    a spaced slash (`a / b`) as `a/b`, a spaced ASCII hyphen
    (`a - b`) as a hyphen, a list of numbers as one number (`1,2`), and
    abbreviations come out with a space after each period (`e. g.`).

    Args:
        tokens: a list of token strings, e.g. `tokenizer.id_to_token` of
            each id (special tokens already removed).
        suffix_indicator: the prefix of word-continuation pieces; None or ""
            when there are none.

    Returns:
        A string.

    Example:
    >>> join_word_pieces(["I", "'", "ve", "a", "do", "##g", "."])
    "I've a dog."
    >>> join_word_pieces(["„", "Ich", "komme", "“", ",", "sagte", "sie", "."])
    '„Ich komme“, sagte sie.'
    >>> join_word_pieces(["It", "costs", "3", ".", "5", "%", "of", "1", ",", "000"])
    'It costs 3.5% of 1,000'
    """
    if isinstance(tokens, str):
        raise ValueError(
            "`tokens` must be a list of token strings, not one string (split "
            f"it first: text.split()). Received: tokens={tokens[:40]!r}"
        )
    words = _merge_suffixes([str(t) for t in tokens], suffix_indicator)
    pieces = []
    attach = True  # no space before the first token
    open_quotes = []  # the closing mark each open quote waits for
    for i, token in enumerate(words):
        before = words[i - 1] if i > 0 else None
        after = words[i + 1] if i + 1 < len(words) else None
        glue_left = token in _CLOSING
        glue_right = token in _OPENING
        between_words = _is_word(before) and _is_word(after)
        if (
            token in _APOSTROPHES
            and between_words
            and (
                after.lower() in _CONTRACTIONS
                or (len(before) == 1 and before.isalpha() and before not in "aAI")
            )
        ):
            glue_left = glue_right = True
        elif token in _CLOSES or token in _APOSTROPHES or token in "”":
            if open_quotes and open_quotes[-1] == token:
                open_quotes.pop()
                glue_left, glue_right = True, False
            elif token in _CLOSES:
                open_quotes.append(_CLOSES[token])
                glue_left, glue_right = False, True
            elif token == "'":  # a straight quote opens as well as closes
                open_quotes.append(token)
                glue_left, glue_right = False, True
            else:  # ’ ” closing what nothing opened: "months’ pay"
                glue_left, glue_right = True, False
        elif token == "-" and between_words and after in _AFTER_SUSPENDED_HYPHEN:
            glue_left = True
        elif token in ("-", "/") and between_words:
            glue_left = glue_right = True
        elif token == "/" and before is not None and before[-1:] == ".":
            glue_left = glue_right = _is_word(after)  # "sb./sth."
        elif (
            token in (".", ":", ",")
            and before is not None
            and before[-1:].isdigit()
            and after is not None
            and after.isdigit()
        ):
            glue_left = glue_right = True
        pieces.append(token if attach or glue_left else " " + token)
        attach = glue_right
    return "".join(pieces)


def detokenize(tokenizer, token_ids, skip_special_tokens=True):
    """Token ids to text, for any keras-hub tokenizer.

    A `WordPieceTokenizer` (and subclasses such as `BertTokenizer` and
    `keras_tfm.convert.HFBertTokenizer`) goes through `join_word_pieces`,
    so that "I ' ve a dog ." reads "I've a dog."; other tokenizers (byte,
    BPE, SentencePiece) keep the text themselves and use their own
    `detokenize`, decoded from UTF-8 bytes when it returns bytes.

    Args:
        tokenizer: a keras-hub tokenizer.
        token_ids: one sequence of ids (list, array or tensor), or a batch
            of them (nested lists, a 2-D array, or a ragged tensor).
        skip_special_tokens: drop the WordPiece tokenizer's special tokens
            (`[PAD]`, `[START]`, `[END]`, `[CLS]`, `[SEP]`, ...). `[UNK]`
            stays: it marks a word the vocabulary could not spell.

    Returns:
        A string for one sequence, a list of strings for a batch.

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
    ...     vocabulary=["[PAD]", "[UNK]", "I", "'", "ve", "a", "do", "##g", "."],
    ...     special_tokens=["[PAD]"], oov_token="[UNK]")
    >>> detokenize(tokenizer, [2, 3, 4, 5, 6, 7, 8, 0, 0])
    "I've a dog."
    """
    token_ids = python_ids(token_ids)
    if isinstance(token_ids, int | np.integer):
        raise ValueError(
            "`token_ids` must be a sequence of ids or a batch of them. "
            f"Received: token_ids={token_ids!r}"
        )
    token_ids = list(token_ids)
    if token_ids and not isinstance(token_ids[0], int | np.integer):
        return [detokenize(tokenizer, row, skip_special_tokens) for row in token_ids]
    if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        text = tokenizer.detokenize(token_ids)
        if hasattr(text, "numpy"):
            text = text.numpy()
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    vocabulary = tokenizer.get_vocabulary()
    skip = set()
    if skip_special_tokens:
        # Built-in ones (BertTokenizer's [CLS], ...) and those passed to
        # the constructor, which its config lists.
        skip.update(tokenizer.special_tokens)
        skip.update(tokenizer.get_config().get("special_tokens") or ())
        skip.discard(tokenizer.oov_token)
    tokens = []
    for i in token_ids:
        if not 0 <= int(i) < len(vocabulary):
            raise ValueError(
                f"`token_ids` holds an id outside the vocabulary [0, "
                f"{len(vocabulary)}). Received: {int(i)}"
            )
        if vocabulary[int(i)] not in skip:
            tokens.append(vocabulary[int(i)])
    return join_word_pieces(tokens, tokenizer.suffix_indicator)
