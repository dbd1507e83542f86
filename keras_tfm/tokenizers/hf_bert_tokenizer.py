"""keras-hub's BertTokenizer with HuggingFace's text normalization."""

import unicodedata

import keras
import keras_hub
import numpy as np

from keras_tfm._optional import is_tf_tensor
from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import tensorflow_text as tf_text


def _is_control(char):
    # As HuggingFace's BasicTokenizer: tab, newline and return are whitespace.
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_whitespace(char):
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def normalize_python(text, lowercase, strip_accents):
    """HuggingFace BasicTokenizer's cleaning, lowercasing and accent removal."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    chars = []
    for char in text:
        if char in "\x00\ufffd" or _is_control(char):
            continue
        chars.append(" " if _is_whitespace(char) else char)
    text = "".join(chars)
    if lowercase:
        text = text.lower()
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    return text


def normalize_tf(text, lowercase, strip_accents):
    """The same normalization in TensorFlow ops, for tf.data and tf.function."""
    text = tf.strings.regex_replace(text, r"[\t\n\r\p{Zs}]", " ")
    # Cleaning comes first: tf.strings.lower stops at a NUL character.
    # HuggingFace drops categories C* (unassigned Cn included, which RE2 has
    # no class for: it is what no other category matches) and U+FFFD.
    text = tf.strings.regex_replace(
        text, r"[\p{C}\x{FFFD}]|[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\p{C}]", ""
    )
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")
    if strip_accents:
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return text


def _map_strings(fn, inputs):
    if isinstance(inputs, (str, bytes)):
        return fn(inputs)
    if isinstance(inputs, np.ndarray):
        return np.vectorize(fn, otypes=[object])(inputs).astype(str)
    if isinstance(inputs, (list, tuple)):
        return [_map_strings(fn, x) for x in inputs]
    raise ValueError(
        "`inputs` must be a string, a list of strings or a string array or "
        f"tensor. Received: type(inputs)={type(inputs).__name__}"
    )


@keras.saving.register_keras_serializable(package="keras_tfm")
class HFBertTokenizer(keras_hub.tokenizers.BertTokenizer):
    """keras-hub's `BertTokenizer` with HuggingFace's `BertTokenizer` text
    normalization, so that token ids equal those of a HuggingFace checkpoint.

    keras-hub lowercases by Unicode case folding (NFKC_Casefold: "ß" becomes
    "ss", "ﬁ" becomes "fi", full-width letters become ASCII) and keeps control
    characters as word breaks. HuggingFace lowercases with Python's
    `str.lower`, deletes control and format characters (e.g. "\\x00",
    zero-width spaces), maps every Unicode space to " " and then strips
    accents. This class applies HuggingFace's normalization (in Python
    eagerly, without TensorFlow; in TensorFlow ops inside tf.data) and
    hands the result to keras-hub's splitting and WordPiece with its own
    lowercasing turned off.

    Args:
        vocabulary: a list of WordPiece tokens or the path of a vocab.txt.
        lowercase: lowercase the text (HuggingFace's `do_lower_case`).
        strip_accents: remove accents; None follows `lowercase` (HuggingFace's
            default).
        split_on_cjk: put CJK ideographs in words of their own
            (HuggingFace's `tokenize_chinese_chars`).
        **kwargs: other `keras_hub.tokenizers.WordPieceTokenizer` arguments.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "strasse", "straße"]
    >>> tokenizer = HFBertTokenizer(vocab, lowercase=True)
    >>> [int(i) for i in tokenizer("STRASSE Straße")]
    [5, 6]
    """

    def __init__(
        self,
        vocabulary=None,
        lowercase=False,
        strip_accents=None,
        split_on_cjk=True,
        **kwargs,
    ):
        for name in ("lowercase", "split_on_cjk"):
            if not isinstance(locals()[name], bool):
                raise ValueError(
                    f"`{name}` must be True or False. Received: "
                    f"{name}={locals()[name]!r}"
                )
        if strip_accents is not None and not isinstance(strip_accents, bool):
            raise ValueError(
                "`strip_accents` must be None, True or False. Received: "
                f"strip_accents={strip_accents!r}"
            )
        kwargs.pop("strip_accents", None)
        super().__init__(
            vocabulary=vocabulary,
            lowercase=False,
            strip_accents=False,
            split_on_cjk=split_on_cjk,
            **kwargs,
        )
        # keras-hub's own `lowercase`/`strip_accents` stay False; ours apply.
        self.hf_lowercase = lowercase
        self.hf_strip_accents = lowercase if strip_accents is None else strip_accents

    def tokenize(self, inputs):
        lowercase, strip = self.hf_lowercase, self.hf_strip_accents
        if is_tf_tensor(inputs) or self._use_tf_workflow():
            if isinstance(inputs, tf.RaggedTensor):
                inputs = tf.ragged.map_flat_values(
                    normalize_tf, inputs, lowercase, strip
                )
            else:
                inputs = normalize_tf(tf.convert_to_tensor(inputs), lowercase, strip)
        else:
            inputs = _map_strings(
                lambda text: normalize_python(text, lowercase, strip), inputs
            )
        return super().tokenize(inputs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "lowercase": self.hf_lowercase,
                "strip_accents": self.hf_strip_accents,
                "split_on_cjk": self.split_on_cjk,
            }
        )
        return config
