"""`classify` and `embed`: an encoder task's string signatures.

The preprocessor (tokenizer and "[CLS] text [SEP]" packing) runs inside the
graph; the rows are cut after the longest text, as the Python API cuts them
(padding is masked, so it changes no output).
"""

import tensorflow as tf


def _packed(preprocessor, texts):
    # (batch, length) ids and mask, cut after the longest row (at least 3
    # columns, as `TextClassifierPreprocessor.pack_texts`).
    x = preprocessor(texts)
    length = tf.maximum(
        tf.reduce_max(tf.reduce_sum(tf.cast(x["padding_mask"], tf.int32), axis=1)), 3
    )
    return {
        "token_ids": tf.cast(x["token_ids"][:, :length], tf.int32),
        "padding_mask": tf.cast(x["padding_mask"][:, :length], tf.bool),
    }


TEXTS = tf.TensorSpec([None], tf.string, name="texts")


def classify_signature(model):
    """`classify(texts) -> {"labels": string[b], "probabilities": float32[b, classes]}`.

    Labels are the class names (the class index as a string without them).
    """
    names = model.class_names or [str(i) for i in range(model.num_classes)]
    names = tf.constant(names)

    @tf.function(input_signature=[TEXTS], autograph=False)
    def classify(texts):
        logits = tf.cast(
            model(_packed(model.preprocessor, texts), training=False), tf.float32
        )
        probabilities = tf.nn.softmax(logits, axis=-1)
        return {
            "labels": tf.gather(names, tf.argmax(probabilities, axis=-1)),
            "probabilities": probabilities,
        }

    return classify


def embed_signature(model):
    """`embed(texts) -> {"embeddings": float32[b, hidden_dim]}`."""

    @tf.function(input_signature=[TEXTS], autograph=False)
    def embed(texts):
        inputs = _packed(model.preprocessor, texts)
        return {"embeddings": tf.cast(model(inputs, training=False), tf.float32)}

    return embed
