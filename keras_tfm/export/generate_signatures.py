"""`generate`, `chat` and `score`: a causal LM's string signatures.

The prompts are tokenized in the graph, padded as `CausalLM.generate` pads
them, and decoded by the model's own XLA loop with its settings as tensors
(`decoding.Decoder`, one traced loop for every signature); the new text is
detokenized in the graph. Each row is decoded as if it were alone, as in
Python, sampling included.
"""

import tensorflow as tf

from keras_tfm.export import decoding, graph_text
from keras_tfm.lite.chat_template import single_turn_frame

PROMPTS = tf.TensorSpec([None], tf.string, name="prompts")
OPTIONS = [
    PROMPTS,
    tf.TensorSpec([], tf.int32, name="max_new_tokens"),
    tf.TensorSpec([], tf.float32, name="temperature"),
    tf.TensorSpec([], tf.int32, name="top_k"),
    tf.TensorSpec([], tf.float32, name="top_p"),
    tf.TensorSpec([], tf.int64, name="seed"),
]


def _check_options(max_new_tokens, temperature, top_k, top_p):
    tf.debugging.assert_positive(
        max_new_tokens, message="max_new_tokens must be positive"
    )
    tf.debugging.assert_non_negative(temperature, message="temperature must be >= 0")
    tf.debugging.assert_non_negative(top_k, message="top_k must be >= 0 (0: off)")
    tf.debugging.assert_positive(top_p, message="top_p must be in (0, 1]")
    tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in (0, 1]")


def generate_with_options_signature(model, decoder):
    """`generate_with_options(prompts, max_new_tokens: int32, temperature:
    float32, top_k: int32, top_p: float32, seed: int64) -> {"texts"}`.

    As `model.generate(prompts, max_new_tokens, sampler="top_p",
    temperature=..., top_k=..., top_p=..., seed=...)`: temperature 0 is
    greedy (`generate`'s default sampler), top_k 0 and top_p 1 are off.
    """
    tokenizer = model.preprocessor.tokenizer
    stops = decoding.default_stops(model)

    @tf.function(input_signature=OPTIONS, autograph=False)
    def generate_with_options(prompts, max_new_tokens, temperature, top_k, top_p, seed):
        _check_options(max_new_tokens, temperature, top_k, top_p)
        ids = graph_text.tokenize(tokenizer, prompts)
        settings = decoding.settings(
            tf.shape(prompts)[0], stops, temperature, top_k, top_p, seed
        )
        ids = decoder.decode(ids, max_new_tokens, settings)
        return {"texts": graph_text.detokenize(tokenizer, decoding.drop(ids, stops))}

    return generate_with_options


def generate_signature(with_options, max_new_tokens):
    """`generate(prompts) -> {"texts"}`: greedy, prompt and continuation.

    `with_options` with the export's `max_new_tokens`, greedy: one traced
    loop serves both signatures.
    """

    @tf.function(input_signature=[PROMPTS], autograph=False)
    def generate(prompts):
        return with_options(
            prompts, tf.constant(max_new_tokens, tf.int32), tf.constant(0.0),
            tf.constant(0, tf.int32), tf.constant(1.0), tf.constant(0, tf.int64),
        )  # fmt: skip

    return generate


def chat_signature(model, decoder, max_new_tokens):
    """`chat(messages) -> {"answers"}`: one user message per row.

    As `CausalLM.chat`: the checkpoint's chat template (its rendering of one
    user message, split around the message: `single_turn_frame`), the answer
    up to the end of the turn, stripped.
    """
    tokenizer = model.preprocessor.tokenizer
    head, tail = single_turn_frame(
        tokenizer.chat_template, **tokenizer.template_tokens()
    )
    end_id = tokenizer.end_token_id

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string, name="messages")],
        autograph=False,
    )
    def chat(messages):
        texts = tf.strings.join([head, messages, tail])
        prompts = graph_text.tokenize(tokenizer, texts)
        settings = decoding.settings(tf.shape(messages)[0], (end_id,))
        ids = decoder.decode(prompts, tf.constant(max_new_tokens), settings)
        positions = tf.ragged.range(ids.row_lengths())
        new = tf.ragged.boolean_mask(
            ids, positions >= tf.cast(prompts.row_lengths(), tf.int64)[:, None]
        )
        new = decoding.drop(new, (end_id,))
        return {"answers": graph_text.strip(graph_text.detokenize(tokenizer, new))}

    return chat


def score_signature(model):
    """`score(texts) -> {"log_likelihood": float32[b]}`.

    The sum over a text's tokens after the first of log p(token | tokens
    before it) (the first token has no context to be scored on).
    """
    tokenizer = model.preprocessor.tokenizer

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string, name="texts")],
        autograph=False,
    )
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
