"""Small tasks for tests, built through the public API in one call.

`causal_lm(...)` and `seq2seq_lm(...)` take the backbone's arguments and
the task's own ones together, build the backbone, a preprocessor around
`tokenizer` (when given) and the task, as a user writes in three lines.
"""

import weakref

from keras_tfm.models import (
    CausalLM,
    DecoderBackbone,
    Seq2SeqBackbone,
    Seq2SeqLM,
)


def causal_lm(*args, tokenizer=None, tie_word_embeddings=True, **kwargs):
    """`CausalLM(DecoderBackbone(*args, **kwargs), ...)`."""
    name = kwargs.pop("name", None)
    backbone = DecoderBackbone(*args, **kwargs)
    preprocessor = None
    if tokenizer is not None:
        preprocessor = CausalLM.preprocessor_for(tokenizer, backbone)
    return CausalLM(
        backbone,
        preprocessor,
        tie_word_embeddings=tie_word_embeddings,
        dtype=kwargs.get("dtype"),
        **({"name": name} if name else {}),
    )


def seq2seq_lm(
    *args,
    tokenizer=None,
    tie_word_embeddings=True,
    use_logits_bias=False,
    start_token_id=None,
    **kwargs,
):
    """`Seq2SeqLM(Seq2SeqBackbone(*args, **kwargs), ...)`."""
    backbone = Seq2SeqBackbone(*args, **kwargs)
    preprocessor = None
    if tokenizer is not None:
        preprocessor = Seq2SeqLM.preprocessor_for(tokenizer, backbone)
    return Seq2SeqLM(
        backbone,
        preprocessor,
        tie_word_embeddings=tie_word_embeddings,
        use_logits_bias=use_logits_bias,
        start_token_id=start_token_id,
        dtype=kwargs.get("dtype"),
    )


_GRAPH_FORWARDS = weakref.WeakKeyDictionary()


def graph_forward(model):
    """`model(x)` as one traced graph on TensorFlow, for references called often.

    An eager Keras call of a tiny decoder costs ~85 ms on TensorFlow (tens of
    thousands of small op dispatches); the traced graph ~1 ms. Shapes are
    relaxed after the second (`reduce_retracing`), so a reference that grows
    its input one token a step traces two or three times. Not compiled with
    XLA: the reference stays the plain forward pass. Other backends: `model`.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        return model
    if model not in _GRAPH_FORWARDS:  # one function a model: traced once
        import tensorflow as tf

        _GRAPH_FORWARDS[model] = tf.function(
            lambda x: model(x, training=False), reduce_retracing=True
        )
    return _GRAPH_FORWARDS[model]
