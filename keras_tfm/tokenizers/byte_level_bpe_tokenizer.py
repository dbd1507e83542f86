"""keras-hub's BytePairTokenizer with a checkpoint's pre-tokenization.

The byte-level BPE tokenizer of the converted GPT-2 and Llama-family
checkpoints, HuggingFace and GGUF alike. It was first written for GGUF
files and named `GGUFBytePairTokenizer`; that name stays registered, so a
`.keras` file or preset whose config names it still loads (as this class).
"""

import keras
import keras_hub
import numpy as np
from keras_hub.src.tokenizers.byte_pair_tokenizer import SPLIT_PATTERN_TOKENIZERS
from tokenizers import Regex, models, normalizers, pre_tokenizers

from keras_tfm._optional import tensorflow as tf
from keras_tfm.tokenizers.chat_formatting import ChatTemplateMixin

# How text is cut into pieces before the merges. "gpt2": GPT-2's byte-level
# regex. "smollm" (also StarCoder's): every Unicode numeral (\p{N}) is first
# cut out on its own, then GPT-2's regex applies to the pieces (llama.cpp's
# llama-vocab.cpp; SmolLM2's own tokenizer.json: Digits(individual_digits)
# then ByteLevel). "split": the pieces are the matches of `split_pattern`
# and the text between them (a tokenizer.json Split(Isolated) step, then
# ByteLevel without its own regex: Llama 3, Qwen2).
PRE_TOKENIZERS = ("gpt2", "smollm", "split")
NORMALIZERS = (None, "NFC")

# Llama 3's split (Meta's tokenizer.json), which keras-hub's BytePairTokenizer
# applies: digits in runs of up to three, a letter run may take one leading
# symbol, contractions in any case.
LLAMA3_SPLIT_PATTERN = SPLIT_PATTERN_TOKENIZERS
# Qwen2's (transformers' Qwen2Tokenizer): Llama 3's with single digits.
QWEN2_SPLIT_PATTERN = LLAMA3_SPLIT_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def _check_split_pattern(pre_tokenizer, split_pattern):
    if (pre_tokenizer == "split") != (split_pattern is not None):
        raise ValueError(
            "`split_pattern` is needed with pre_tokenizer='split' and only "
            f"then. Received: pre_tokenizer={pre_tokenizer!r}, "
            f"split_pattern={split_pattern!r}"
        )
    if split_pattern is None:
        return
    try:
        Regex(split_pattern)
    except Exception as error:  # tokenizers raises a bare Exception.
        raise ValueError(
            f"`split_pattern` is not a valid regex ({error}). Received: "
            f"split_pattern={split_pattern!r}"
        ) from None


@keras.saving.register_keras_serializable(package="keras_tfm")
class ByteLevelBPETokenizer(ChatTemplateMixin, keras_hub.tokenizers.BytePairTokenizer):
    """keras-hub's `BytePairTokenizer` with a checkpoint's pre-tokenization,
    special tokens and chat template.

    keras-hub's byte-pair tokenizer splits text before merging with one
    fixed regex, Llama 3's (`LLAMA3_SPLIT_PATTERN`). GPT-2-style checkpoints
    split with GPT-2's regex instead, SmolLM2 ("smollm") also cuts out every
    numeral, Qwen2 splits digits singly (`QWEN2_SPLIT_PATTERN`), so the split
    is replaced by the checkpoint's, in the `tokenizers` library that
    keras-hub's eager calls use (in `tf.data` and `tf.function` too, see
    `_tokenize_tf`); so are an NFC normalizer (Qwen2) and Llama 3's
    `ignore_merges`. Merging, special tokens (`unsplittable_tokens`: never
    split, one id each) and the byte-level decoding are keras-hub's.

    Args:
        vocabulary: dict token -> id, or the path of a vocabulary.json.
        merges: list of "a b" merge rules, or the path of a merges.txt.
        pre_tokenizer: "smollm" (default), "gpt2" or "split" (see
            `PRE_TOKENIZERS`).
        split_pattern: with pre_tokenizer="split", the regex whose matches
            (and the text between them) are the pieces merged separately,
            e.g. `LLAMA3_SPLIT_PATTERN`; None otherwise.
        normalizer: None, or "NFC" to compose characters first (Qwen2).
        ignore_merges: if True, a piece that is a whole vocabulary token
            becomes that token without merging (Llama 3).
        unsplittable_tokens: special tokens kept whole (e.g. "<|im_start|>").
        bos_token, eos_token, pad_token: the tokens of those roles
            (`start_token_id`, `end_token_id`, `pad_token_id` then hold
            their ids); None for none.
        chat_template: the checkpoint's chat template (Jinja2 source), used
            by `apply_chat_template` (rendered in Jinja2's sandbox, as
            transformers renders it: `keras_tfm.tokenizers.render_chat_template`).
        **kwargs: other `keras_hub.tokenizers.BytePairTokenizer` arguments.

    Example:
    >>> vocab = {"<|im_end|>": 0, "a": 1, "b": 2, "ab": 3, "1": 4, "Ġ": 5}
    >>> tokenizer = ByteLevelBPETokenizer(
    ...     vocab, ["a b"], unsplittable_tokens=["<|im_end|>"],
    ...     eos_token="<|im_end|>")
    >>> [int(i) for i in tokenizer("ab 11<|im_end|>")]
    [3, 5, 4, 4, 0]
    >>> tokenizer.detokenize([3, 5, 4, 4, 0])
    'ab 11<|im_end|>'

    Llama 3's split cuts digit runs into pieces of three ("121", "2"), which
    are merged separately; GPT-2's keeps "1212" whole:

    >>> llama3 = ByteLevelBPETokenizer(
    ...     {"1": 0, "2": 1, "12": 2}, ["1 2"], pre_tokenizer="split",
    ...     split_pattern=LLAMA3_SPLIT_PATTERN)
    >>> [llama3.id_to_token(int(i)) for i in llama3("1212")]
    ['12', '1', '2']
    >>> gpt2 = ByteLevelBPETokenizer(
    ...     {"1": 0, "2": 1, "12": 2}, ["1 2"], pre_tokenizer="gpt2")
    >>> [gpt2.id_to_token(int(i)) for i in gpt2("1212")]
    ['12', '12']
    """

    def __init__(
        self,
        vocabulary=None,
        merges=None,
        pre_tokenizer="smollm",
        split_pattern=None,
        normalizer=None,
        ignore_merges=False,
        unsplittable_tokens=None,
        bos_token=None,
        eos_token=None,
        pad_token=None,
        chat_template=None,
        **kwargs,
    ):
        if pre_tokenizer not in PRE_TOKENIZERS:
            raise ValueError(
                f"`pre_tokenizer` must be one of {list(PRE_TOKENIZERS)}. "
                f"Received: pre_tokenizer={pre_tokenizer!r}"
            )
        _check_split_pattern(pre_tokenizer, split_pattern)
        if normalizer not in NORMALIZERS:
            raise ValueError(
                f"`normalizer` must be one of {list(NORMALIZERS)}. Received: "
                f"normalizer={normalizer!r}"
            )
        self.pre_tokenizer = pre_tokenizer
        self.split_pattern = split_pattern
        self.normalizer = normalizer
        self.ignore_merges = bool(ignore_merges)
        self._set_roles(bos_token, eos_token, pad_token, chat_template)
        super().__init__(
            vocabulary=vocabulary,
            merges=merges,
            unsplittable_tokens=list(unsplittable_tokens or []),
            **kwargs,
        )

    def _set_vocabulary_and_merges_tokenizers(self, vocabulary, merges):
        # keras-hub's hook that builds the `tokenizers` pipeline of eager
        # calls (private: the only place its pre-tokenizer is chosen).
        super()._set_vocabulary_and_merges_tokenizers(vocabulary, merges)
        if self.ignore_merges:
            # keras-hub's BPE model has no `ignore_merges` argument.
            pairs = [tuple(m.split(" ")) for m in self.merges if "#version:" not in m]
            self._tokenizer.model = models.BPE(
                vocab=self.vocabulary, merges=pairs, ignore_merges=True
            )
        if self.normalizer == "NFC":
            self._tokenizer.normalizer = normalizers.NFC()
        byte_level = pre_tokenizers.ByteLevel(
            add_prefix_space=self.add_prefix_space,
            use_regex=self.pre_tokenizer != "split",
        )
        steps = [byte_level]
        if self.pre_tokenizer == "smollm":
            steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
        elif self.pre_tokenizer == "split":
            pattern = Regex(self.split_pattern)
            steps.insert(0, pre_tokenizers.Split(pattern, behavior="isolated"))
        self._tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)

    def _tokenize_tf(self, inputs):
        # keras-hub's TensorFlow split only approximates GPT-2's regex (RE2
        # has no lookahead): it cuts trailing spaces ("   " -> "  ", " ") and
        # joins "\r\n" before a word. In tf.data and tf.function the same
        # `tokenizers` pipeline as in eager calls runs, through py_function.
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        as_ids = self.compute_dtype != "string"

        def encode(strings):
            self._maybe_initialized_tokenizers()
            texts = [s.decode("utf-8") for s in strings.numpy().reshape(-1)]
            encoded = self._tokenizer.encode_batch(texts)
            pieces = [e.ids if as_ids else e.tokens for e in encoded]
            values = [x for piece in pieces for x in piece]
            values = np.array(values, "int64" if as_ids else object)
            return values, np.array([len(p) for p in pieces], "int64")

        values, lengths = tf.py_function(
            encode, [inputs], [tf.int64 if as_ids else tf.string, tf.int64]
        )
        values.set_shape([None])
        lengths.set_shape([None])
        if as_ids:
            values = tf.cast(values, self.compute_dtype)
        tokens = tf.RaggedTensor.from_row_lengths(values, lengths)
        if self.sequence_length:
            # Padded with pad_token_id, as keras-hub's eager path pads.
            pad = getattr(self, "pad_token_id", None) or 0
            tokens = tokens.to_tensor(
                default_value=pad if as_ids else "",
                shape=(None, self.sequence_length),
            )
        if unbatched:
            tokens = tokens[0]
        return tokens

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "pre_tokenizer": self.pre_tokenizer,
                "split_pattern": self.split_pattern,
                "normalizer": self.normalizer,
                "ignore_merges": self.ignore_merges,
                "bos_token": self.bos_token,
                "eos_token": self.eos_token,
                "pad_token": self.pad_token,
                "chat_template": self.chat_template,
            }
        )
        return config


GGUFBytePairTokenizer = ByteLevelBPETokenizer
"""`ByteLevelBPETokenizer` under its first name, which `.keras` files and
presets saved before the rename give as "keras_tfm>GGUFBytePairTokenizer";
they load as `ByteLevelBPETokenizer`."""
keras.saving.get_custom_objects()["keras_tfm>GGUFBytePairTokenizer"] = (
    ByteLevelBPETokenizer
)
