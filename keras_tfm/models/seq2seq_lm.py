import keras
import numpy as np
from keras import ops

from keras_tfm.generation import buffers, cached_steps, scoring, token_inputs
from keras_tfm.layers.hyperparameters import as_bool
from keras_tfm.models._common import make_logits_bias
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.models.seq2seq_backbone import Seq2SeqBackbone
from keras_tfm.models.seq2seq_lm_preprocessor import Seq2SeqLMPreprocessor
from keras_tfm.validation import check_rank, check_token_id


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqLM(CausalLM):
    """An encoder-decoder language model: translation and other text-to-text.

        h      = Seq2SeqBackbone(source, target)
        logits = h E^T (+ b with `use_logits_bias`)
                 (h scaled by hidden_dim ** -0.5 first with
                 `scale_decoder_outputs`, T5's tied head)

    Generation is `CausalLM`'s, one implementation for both families (every
    sampler, streaming, beam search); this class supplies only its context
    (the source encoded once and each decoder block's cross-attention keys
    and values computed once) and its cached decoder step. The decoder
    prompt is the start token, which `generate` does not return: each
    output is the new tokens.

    Args:
        backbone: a `Seq2SeqBackbone`.
        preprocessor: optional `Seq2SeqLMPreprocessor`; with it `generate`
            takes and returns strings and `fit` takes (source, target) strings.
        tie_word_embeddings: project to logits with the shared embedding
            (default, the paper) or with a separate `lm_head`.
        use_logits_bias: add a learned bias per vocabulary entry to the
            logits (sublayer `logits_bias`; Marian's `final_logits_bias`).
        start_token_id: the decoder's first input; None: the preprocessor's
            start token ("[START]", "<s>", ...).
        scale_decoder_outputs: multiply the decoder's output by
            `hidden_dim ** -0.5` before the head (T5 with tied embeddings).

    Call arguments:
        inputs: a dict with int "source_ids" (batch, src_seq) and
            "target_ids" (batch, tgt_seq), the decoder inputs (teacher
            forcing: the targets shifted right, see `teacher_forcing`).
        training: whether dropout is active.
        return_attention_scores: also return every block's attention
            weights (see `Seq2SeqBackbone`).

    Returns:
        float32 logits (batch, tgt_seq, vocabulary_size).

    Example:
    >>> backbone = keras_tfm.models.Seq2SeqBackbone(
    ...     vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
    ...     num_heads=2, hidden_dim=16, intermediate_dim=32,
    ...     max_sequence_length=16)
    >>> model = keras_tfm.models.Seq2SeqLM(backbone, start_token_id=1)
    >>> model({"source_ids": np.array([[3, 4, 5]]),
    ...        "target_ids": np.array([[1, 6]])}).shape
    TensorShape([1, 2, 20])
    >>> len(model.generate([[3, 4, 5]], max_new_tokens=4)[0])
    4
    """

    backbone_class = Seq2SeqBackbone
    preprocessor_class = Seq2SeqLMPreprocessor
    prompt_through_step = 0  # the decoding steps read the encoder's context
    is_decoder_only = False

    def __init__(
        self,
        backbone,
        preprocessor=None,
        tie_word_embeddings=True,
        use_logits_bias=False,
        start_token_id=None,
        scale_decoder_outputs=False,
        **kwargs,
    ):
        super().__init__(backbone, preprocessor, tie_word_embeddings, **kwargs)
        self.scale_decoder_outputs = as_bool(
            "scale_decoder_outputs", scale_decoder_outputs
        )
        self.use_logits_bias = bool(use_logits_bias)
        self.logits_bias = None
        if self.use_logits_bias:
            self.logits_bias = make_logits_bias(backbone.vocabulary_size)
        self.start_token_id = check_token_id(
            "start_token_id", start_token_id, backbone.vocabulary_size, optional=True
        )

    @staticmethod
    def teacher_forcing(target_ids, start_token_id):
        """Decoder inputs and labels from target sequences, for `fit`.

        `decoder_inputs` is `target_ids` shifted right by one with
        `start_token_id` in front (the last token dropped); `labels` is
        `target_ids`. Use a loss with `ignore_class=padding_id` so that the
        padding of the labels does not count.

        Example:
        >>> Seq2SeqLM.teacher_forcing(np.array([[5, 6, 2, 0]]), 1)
        (array([[1, 5, 6, 2]], dtype=int32), array([[5, 6, 2, 0]], dtype=int32))
        """
        target_ids = np.asarray(target_ids)
        if target_ids.ndim != 2 or not np.issubdtype(target_ids.dtype, np.integer):
            raise ValueError(
                "`target_ids` must be an integer (batch, seq) array. Received: "
                f"target_ids.shape={target_ids.shape}, dtype={target_ids.dtype}"
            )
        start = np.full((len(target_ids), 1), start_token_id, "int32")
        inputs = np.concatenate([start, target_ids[:, :-1]], axis=1).astype("int32")
        return inputs, target_ids.astype("int32")

    def logits(self, hidden):
        if self.scale_decoder_outputs:
            hidden = hidden * ops.cast(self.backbone.hidden_dim**-0.5, hidden.dtype)
        logits = super().logits(hidden)
        if self.logits_bias is not None:
            logits = self.logits_bias(logits)
        return logits

    def output_table(self):
        """CausalLM's, scaled as `logits` scales the hidden states (None with
        a logits bias: the hidden-state loss has no bias)."""
        table = super().output_table()
        if table is None or self.logits_bias is not None:
            return None
        if self.scale_decoder_outputs:
            table = table * ops.cast(self.backbone.hidden_dim**-0.5, table.dtype)
        return table

    # `call` and `empty_cache` (the decoder's self-attention) are CausalLM's.

    def compute_cross_attention_cache(self, encoder_outputs):
        """Every decoder block's cross-attention keys and values, computed once.

        Returns (batch, num_decoder_layers, 2, src_seq, heads, head_dim).
        """
        caches = self.backbone.compute_cross_attention_cache(encoder_outputs)
        return ops.stack(caches, axis=1)

    def call_with_cache(
        self,
        target_ids,
        cache,
        cache_update_index,
        cross_attention_cache,
        encoder_padding_mask=None,
    ):
        """`Seq2SeqBackbone.call_with_cache` on the stacked caches, then the
        logits: `(logits, cache)`.

        `cache` is `empty_cache`'s stack of the blocks' self-attention caches
        and `cross_attention_cache` `compute_cross_attention_cache`'s; the
        other arguments are the backbone's.
        """
        check_rank("cache", cache, 6, "(batch, layers, 2, max_length, heads, dim)")
        layers = range(self.backbone.num_decoder_layers)
        hidden, caches = self.backbone.call_with_cache(
            target_ids,
            tuple(cache[:, i] for i in layers),
            cache_update_index,
            tuple(cross_attention_cache[:, i] for i in layers),
            encoder_padding_mask,
        )
        return self.logits(hidden), ops.stack(caches, axis=1)

    # === The family's part of generation ===

    def decoder_start_id(self):
        """`start_token_id`, or the preprocessor's start token."""
        if self.start_token_id is not None:
            return self.start_token_id
        if self.preprocessor is not None:
            start = self.preprocessor.start_token_id
            if start is not None:
                return start
        raise ValueError(
            "A start token is needed: build the model with `start_token_id=`, or "
            'with a preprocessor whose tokenizer has "[START]" (or "<s>"). '
            f"Received: start_token_id=None and preprocessor={self.preprocessor!r}"
        )

    def generation_inputs(self, rows):
        maximum = self.backbone.max_sequence_length
        longest = max(len(row) for row in rows)
        start = self.decoder_start_id()
        # Sources are padded to a multiple of 8 (masked, so the result is the
        # same) so that nearby lengths share one compiled loop. The mask comes
        # from the row lengths as well as `padding_id`, so that sources of
        # different lengths batch even without one.
        source, source_mask = token_inputs.pad_rows(
            rows, buffers.rounded_length(longest, maximum), self.fill_id
        )
        if self.backbone.padding_id is not None:
            source_mask &= source != self.backbone.padding_id
        return (source, source_mask), [np.array([start])] * len(rows), 1

    def room_after(self, rows):
        """What the decoder's positions leave after its start token."""
        return self.backbone.max_sequence_length - 1

    def check_generation_length(self, rows, max_new_tokens):
        maximum = self.backbone.max_sequence_length
        longest = max(len(row) for row in rows)
        if longest > maximum:
            raise ValueError(
                f"A source is longer than max_sequence_length={maximum}. "
                f"Received: source length {longest}"
            )
        if max_new_tokens > self.room_after(rows):
            raise ValueError(
                "The start token plus `max_new_tokens` exceeds max_sequence_length="
                f"{self.backbone.max_sequence_length}. Received: max_new_tokens="
                f"{max_new_tokens}"
            )
        return False

    def encoder_context(self, encoder_inputs):
        source, source_mask = encoder_inputs
        encoded = self.backbone.encode(source, source_mask)
        return self.backbone.compute_cross_attention_cache(encoded), source_mask

    def repeat_context(self, context, num_beams):
        return tuple(
            tuple(ops.repeat(c, num_beams, axis=0) for c in part)
            if isinstance(part, tuple)
            else ops.repeat(part, num_beams, axis=0)
            for part in context
        )

    def prefill(self, context, tokens, start):
        # The decoder prompt is the start token alone, which the first step
        # reads: an empty cache is all there is to fill.
        return self.backbone.empty_cache(ops.shape(tokens)[0], ops.shape(tokens)[1])

    def decode_step(self, context, tokens, cache, index):
        cross_caches, source_mask = context
        token = cached_steps.previous_token(tokens, index)
        hidden, cache = self.backbone.call_with_cache(
            token, cache, index - 1, cross_caches, source_mask
        )
        return self.logits(hidden)[:, 0, :], cache

    def score(self, sources, targets):
        """The log-likelihood of each target given its source.

            log_likelihood = sum_t log p(y_t | source, start, y_0 ... y_{t-1})

        over every target token (the start token is the decoder's first
        input, not scored; no end token is added: include it to score it).

        Args:
            sources, targets: as many sequences each, in any form `generate`
                takes (strings need the preprocessor).

        Returns:
            `(log_likelihood, count)`: NumPy float64 and int64 (batch,),
            `count` the target lengths.

        Example:
        >>> backbone = keras_tfm.models.Seq2SeqBackbone(
        ...     vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
        ...     num_heads=2, hidden_dim=16, intermediate_dim=32,
        ...     max_sequence_length=16)
        >>> model = keras_tfm.models.Seq2SeqLM(backbone, start_token_id=1)
        >>> model.score([[3, 4, 5], [6]], [[7, 8], [9]])[1].tolist()
        [2, 1]
        """
        return scoring.score_seq2seq(self, sources, targets)

    @classmethod
    def preprocessor_for(cls, tokenizer, backbone):
        return cls.preprocessor_class(
            tokenizer,
            encoder_sequence_length=backbone.max_sequence_length,
            decoder_sequence_length=backbone.max_sequence_length,
            padding_id=backbone.padding_id,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "use_logits_bias": self.use_logits_bias,
                "start_token_id": self.start_token_id,
                "scale_decoder_outputs": self.scale_decoder_outputs,
            }
        )
        return config
