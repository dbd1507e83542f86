"""`generate`, `chat` and `score`: a causal LM's string signatures.

The prompts are tokenized in the graph, padded as `CausalLM.generate` pads
them, and decoded by the model's own XLA loop (`CausalLM._loop`: prefill,
then the cached step, keras-hub's sampler); the new text is detokenized in
the graph. Each row is decoded as if it were alone, as in Python.
"""

import tensorflow as tf

from keras_tfm.export import graph_text
from keras_tfm.generation import generation_utils as gen
from keras_tfm.tokenizers.chat_template import IM_END, IM_START, parse_chatml_template

PROMPTS = tf.TensorSpec([None], tf.string, name="prompts")


def greedy_decoder(model, stop_token_ids):
    """`decode(ids: ragged int32, max_new_tokens) -> ragged int32` (prompt + new).

    Rows are cut after the first stop id past their prompt (kept), as
    `CausalLM.generate` cuts them.
    """
    sampler, _ = gen.make_sampler("greedy", padding_id=model.fill_id)
    backbone = model.backbone
    stops = stop_token_ids or None

    @tf.function(jit_compile=True)
    def loop(tokens, mask, start, end, prefill_length):
        # `CausalLM._loop` with the prefill length a tensor: XLA takes the
        # slice's size as a compile-time constant, one compilation per
        # length bucket (nested in a traced graph, a Python int could not
        # be read from the prompts).
        cache = backbone.empty_cache(tf.shape(tokens)[0], tf.shape(tokens)[1])
        _, cache = backbone.call_with_cache(
            tokens[:, :prefill_length], cache, 0, backbone.padding_mask_of(tokens)
        )

        def next(tokens, cache, index):
            logits, cache = model.decode_step((), tokens, cache, index)
            return logits, None, cache

        return gen.run_sampler(sampler, next, tokens, cache, start, mask, stops, end)

    maximum = model.backbone.max_sequence_length

    def decode(ids, max_new_tokens):
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        longest, shortest = tf.reduce_max(lengths), tf.reduce_min(lengths)
        tf.debugging.assert_positive(shortest, message="A prompt is empty")
        tf.debugging.assert_less_equal(
            longest + max_new_tokens,
            maximum,
            message=f"A prompt plus max_new_tokens exceeds max_sequence_length="
            f"{maximum} (the exported loop does not slide its window)",
        )
        length = tf.minimum(gen.bucket_length(longest + max_new_tokens), maximum)
        tokens = ids.to_tensor(default_value=model.fill_id, shape=[None, None])
        tokens = tf.pad(tokens, [[0, 0], [0, length - tf.shape(tokens)[1]]],
                        constant_values=model.fill_id)  # fmt: skip
        mask = tf.sequence_mask(lengths, length)
        prefill = tf.minimum(gen.bucket_length(shortest), length)
        out = loop(tokens, mask, shortest, longest + max_new_tokens, prefill)
        # Each row: its prompt and max_new_tokens, cut after a stop id.
        keep = tf.sequence_mask(lengths + max_new_tokens, length)
        if stop_token_ids:
            is_stop = tf.reduce_any(
                out[:, :, None] == tf.constant(stop_token_ids, out.dtype), axis=-1
            )
            is_stop &= ~mask & keep
            after = tf.cumsum(tf.cast(is_stop, tf.int32), axis=1, exclusive=True)
            keep &= after == 0
        return tf.ragged.boolean_mask(out, keep)

    return decode


def _drop(ids, stop_token_ids):
    if not stop_token_ids:
        return ids
    is_stop = tf.reduce_any(
        ids.flat_values[:, None] == tf.constant(stop_token_ids, ids.dtype), axis=-1
    )
    return tf.ragged.boolean_mask(ids, ~ids.with_flat_values(is_stop))


def _default_stops(model):
    stops = model.default_stop_token_ids()
    return tuple(gen.check_stop_token_ids(stops, model.backbone.vocabulary_size) or ())


def generate_with_options_signature(model):
    """`generate_with_options(prompts, max_new_tokens: int32) -> {"texts"}`."""
    tokenizer = model.preprocessor.tokenizer
    stops = _default_stops(model)
    decode = greedy_decoder(model, stops)

    @tf.function(
        input_signature=[PROMPTS, tf.TensorSpec([], tf.int32, name="max_new_tokens")]
    )
    def generate_with_options(prompts, max_new_tokens):
        tf.debugging.assert_positive(
            max_new_tokens, message="max_new_tokens must be positive"
        )
        ids = decode(graph_text.tokenize(tokenizer, prompts), max_new_tokens)
        return {"texts": graph_text.detokenize(tokenizer, _drop(ids, stops))}

    return generate_with_options


def generate_signature(with_options, max_new_tokens):
    """`generate(prompts) -> {"texts"}`: greedy, prompt and continuation.

    `with_options` with the export's `max_new_tokens`: one traced loop
    serves both signatures.
    """

    @tf.function(input_signature=[PROMPTS])
    def generate(prompts):
        return with_options(prompts, tf.constant(max_new_tokens, tf.int32))

    return generate


def chat_signature(model, max_new_tokens):
    """`chat(messages) -> {"answers"}`: one user message per row, ChatML.

    As `CausalLM.chat`: the template (with its default system prompt), the
    answer up to the end of the turn, stripped.
    """
    tokenizer = model.preprocessor.tokenizer
    system = parse_chatml_template(tokenizer.chat_template)
    head = "" if system is None else f"{IM_START}system\n{system}{IM_END}\n"
    end_id = tokenizer.end_token_id
    decode = greedy_decoder(model, (end_id,))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="messages")])
    def chat(messages):
        texts = tf.strings.join(
            [f"{head}{IM_START}user\n", messages, f"{IM_END}\n{IM_START}assistant\n"]
        )
        prompts = graph_text.tokenize(tokenizer, texts)
        ids = decode(prompts, max_new_tokens)
        positions = tf.ragged.range(ids.row_lengths())
        new = tf.ragged.boolean_mask(
            ids, positions >= tf.cast(prompts.row_lengths(), tf.int64)[:, None]
        )
        new = _drop(new, (end_id,))
        return {"answers": graph_text.strip(graph_text.detokenize(tokenizer, new))}

    return chat


def score_signature(model):
    """`score(texts) -> {"log_likelihood": float32[b]}`.

    The sum over a text's tokens after the first of log p(token | tokens
    before it) (the first token has no context to be scored on).
    """
    tokenizer = model.preprocessor.tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def score(texts):
        ids = graph_text.tokenize(tokenizer, texts)
        tokens = ids.to_tensor(default_value=model.fill_id)
        mask = tf.sequence_mask(ids.row_lengths(), tf.shape(tokens)[1])
        logits = tf.cast(model(tokens, training=False), tf.float32)
        log_p = tf.nn.log_softmax(logits[:, :-1], axis=-1)
        chosen = tf.gather(log_p, tokens[:, 1:], batch_dims=2)
        chosen = tf.where(mask[:, 1:], chosen, 0.0)
        return {"log_likelihood": tf.reduce_sum(chosen, axis=1)}

    return score
