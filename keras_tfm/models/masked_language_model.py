import keras
import keras_hub
import numpy as np

from keras_tfm.data.detokenization import detokenize
from keras_tfm.models.encoder_backbone import unpack_encoder_inputs
from keras_tfm.models.encoder_task import EncoderTask
from keras_tfm.models.masked_lm_preprocessor import MaskedLMPreprocessor
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.validation import check_rank

INPUT_KEYS = ("token_ids", "mask_positions", "segment_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedLanguageModel(QuantizationMixin, EncoderTask):
    """BERT's masked-language-model head on an `EncoderBackbone`.

    For the hidden states h at the masked positions only:

        logits = LayerNorm(GELU(h W + b)) E^T + b_out

    where E is the backbone's token embedding (the projection is tied to it)
    and GELU is the exact (erf) form. This is keras-hub's `MaskedLMHead`
    (sublayer `mlm_head` with `intermediate_dense`, `intermediate_layer_norm`
    and `output_bias`, HuggingFace's `cls.predictions`). Computing logits at
    the masked positions only keeps the loss there and saves the
    (batch, seq, vocabulary_size) projection. `MaskedLMMasker` prepares
    `(x, y, sample_weight)` batches of token ids for `fit`, and a
    `MaskedLMPreprocessor` those of strings (`fit` maps it over the data
    itself, and checks the labels against the vocabulary); compile with
    `SparseCategoricalCrossentropy(from_logits=True,
    reduction="mean_with_sample_weight")` and `weighted_metrics`, so that the
    loss and metrics average over the real selections only (the masker pads
    unused slots with weight 0).

    Args:
        backbone: an `EncoderBackbone`; `mlm.backbone` can later feed an
            `EncoderClassifier`.
        preprocessor: optional `MaskedLMPreprocessor` (its tokenizer has a
            "[MASK]" token: a `WordPieceTokenizer` from
            `train_word_piece_tokenizer`, or BERT's); saved with the model,
            and `fit` and `fill_mask` then take text.

    Call arguments:
        inputs: a dict with "token_ids" (batch, seq), "mask_positions"
            (batch, num_masked) int positions to predict, and optionally
            "segment_ids" and "padding_mask" (see `EncoderBackbone`).
        training: whether dropout is active.

    Returns:
        Logits of shape (batch, num_masked, vocabulary_size), float32 under a
        mixed policy.

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> mlm = keras_tfm.models.MaskedLanguageModel(backbone)
    >>> mlm({"token_ids": np.array([[2, 3, 7, 0]]),
    ...      "mask_positions": np.array([[1, 2]])}).shape
    TensorShape([1, 2, 50])
    """

    label_kind = "token"
    preprocessor_class = MaskedLMPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        # keras-hub's MaskedLMHead (autocast=False) adds its float32 bias to
        # logits cast to the compute dtype, which fails under a mixed policy;
        # there the head runs in float32, as the logits should anyway.
        policy = self.dtype_policy
        if policy.compute_dtype != policy.variable_dtype:
            policy = keras.DTypePolicy(policy.variable_dtype)
        self.mlm_head = keras_hub.layers.MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",  # keras's gelu is the exact form
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="mlm_head",
        )
        # Built with both shapes: `summary()` passes the recorded build shapes
        # to its compute_output_shape, which needs `mask_positions_shape`.
        self.mlm_head.build((None, None, backbone.hidden_dim), (None, None))
        self.built = True

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "mask_positions" not in inputs:
            raise ValueError(
                "`inputs` must be a dict with 'token_ids' and 'mask_positions'. "
                f"Received: inputs={inputs!r}"
            )
        inputs = unpack_encoder_inputs(inputs, INPUT_KEYS)
        mask_positions = inputs.pop("mask_positions")
        check_rank("mask_positions", mask_positions, 2, "(batch, num_masked)")
        dtype = keras.backend.standardize_dtype(mask_positions.dtype)
        if "int" not in dtype:
            raise ValueError(
                "`mask_positions` must hold integer positions. "
                f"Received: mask_positions.dtype={dtype}"
            )
        hidden = self.backbone(inputs, training=training)
        return self.mlm_head(hidden, mask_positions=mask_positions)

    def label_range(self):
        return self.backbone.vocabulary_size

    def fill_mask(self, texts, top_k=5, mask_token="[MASK]"):
        """The most probable tokens for each mask of a text, with probabilities.

        The classic demonstration of masked-LM pretraining, as HuggingFace's
        "fill-mask" pipeline: each `[MASK]` is predicted from both sides of
        its context, all masks of a text in one forward pass.

        Special tokens (`[PAD]`, `[CLS]`, `[MASK]`, `[UNK]`, ...) are never
        candidates; the probabilities are the model's softmax over the whole
        vocabulary.

        Args:
            texts: a string, or a list of strings, each with at least one
                `mask_token`.
            top_k: how many candidates per mask, best first.
            mask_token: the placeholder written in the text.

        Returns:
            For a text with one mask, a list of `top_k` dicts
            `{"token", "token_id", "probability", "text"}`, where "text" is
            the input with that token in the mask's place; for a text with
            several masks, one such list per mask (in order); for a list of
            texts, a list of those.

        Example:
        >>> import keras_hub
        >>> tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        ...     vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
        ...                 "cat", "dog", "sat", "on", "mat", "."],
        ...     special_tokens=["[PAD]", "[CLS]", "[SEP]", "[MASK]"],
        ...     oov_token="[UNK]", lowercase=True)
        >>> backbone = keras_tfm.models.EncoderBackbone(
        ...     vocabulary_size=12, num_layers=1, num_heads=2, hidden_dim=16,
        ...     intermediate_dim=32, max_sequence_length=16)
        >>> mlm = keras_tfm.models.MaskedLanguageModel(
        ...     backbone, keras_tfm.models.MaskedLMPreprocessor(
        ...         tokenizer, sequence_length=16))
        >>> candidates = mlm.fill_mask("The [MASK] sat on the mat.", top_k=3)
        >>> len(candidates), sorted(candidates[0])
        (3, ['probability', 'text', 'token', 'token_id'])
        """
        texts, single = self._read_texts(texts)
        vocabulary_size = self.backbone.vocabulary_size
        if (
            isinstance(top_k, bool)
            or not isinstance(top_k, int)
            or not 1 <= top_k <= vocabulary_size
        ):
            raise ValueError(
                f"`top_k` must be an int in [1, {vocabulary_size}]. "
                f"Received: top_k={top_k!r}"
            )
        if not isinstance(mask_token, str) or not mask_token:
            raise ValueError(
                f"`mask_token` must be a non-empty string. Received: {mask_token!r}"
            )
        excluded = self.preprocessor.special_token_ids()
        results = []
        for text in texts:
            ids, positions = self.preprocessor.encode_with_masks(text, mask_token)
            logits = self(
                {"token_ids": ids[None], "mask_positions": positions[None]},
                training=False,
            )
            logits = np.asarray(logits, "float64")[0]  # (num_masks, vocabulary)
            probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities /= probabilities.sum(axis=-1, keepdims=True)
            starts = self.preprocessor.cls_token_id is not None
            ends = self.preprocessor.sep_token_id is not None
            inner = ids.tolist()[int(starts) : -1 if ends else None]
            offset = int(starts)
            per_mask = []
            for position, row in zip(positions, probabilities, strict=True):
                ranked = np.argsort(-row, kind="stable")
                best = [i for i in ranked if int(i) not in excluded][:top_k]
                candidates = []
                for token_id in best:
                    filled = list(inner)
                    filled[position - offset] = int(token_id)
                    candidates.append(
                        {
                            "token": detokenize(self.tokenizer, [int(token_id)], False),
                            "token_id": int(token_id),
                            "probability": float(row[token_id]),
                            "text": detokenize(self.tokenizer, filled, False),
                        }
                    )
                per_mask.append(candidates)
            results.append(per_mask[0] if len(per_mask) == 1 else per_mask)
        return results[0] if single else results

    def get_config(self):
        return self._add_quantization_config(super().get_config())

    @classmethod
    def from_config(cls, config):
        return cls._from_quantized_config(cls._deserialize_parts(config))
