"""`translate` and `translate_with_options`: a sequence-to-sequence model's
string signatures.

The sources are tokenized in the graph (WordPiece runs as TensorFlow ops),
encoded once and decoded by the model's own loops (`decoding.Decoder`):
greedy by the loop of `generate`'s built-in samplers, beam search by
`BeamSearchSampler` with the length penalty an input. The new ids are
rejoined into text in the graph (`word_piece_graph`), as
`keras_tfm.data.detokenize` rejoins them in Python.
"""

import tensorflow as tf

from keras_tfm.export import decoding, graph_text

SOURCES = tf.TensorSpec([None], tf.string, name="sources")
DEFAULT_BEAM_WIDTH = 4
"""The beam width `translate_with_options` offers when the export's default
is greedy (the translator's model card measures `num_beams=4`)."""


def translate_signatures(model, max_new_tokens, num_beams=1, length_penalty=0.0):
    """`{"translate", "translate_with_options"}` of a `Seq2SeqLM`.

    - `translate(sources) -> {"texts"}`: `model.generate(sources,
      max_new_tokens)` with the export's `num_beams` and `length_penalty`
      (greedy by default, as `generate`);
    - `translate_with_options(sources, max_new_tokens: int32, num_beams:
      int32, length_penalty: float32)`: `num_beams` 1 (greedy) or the
      export's beam width (its `num_beams`, or 4 when that is 1): each
      width is one traced loop.
    """
    tokenizer = model.preprocessor.tokenizer
    width = num_beams if num_beams > 1 else DEFAULT_BEAM_WIDTH
    decoder = decoding.Decoder(model, num_beams=width)
    stops = decoding.default_stops(model)

    @tf.function(
        input_signature=[
            SOURCES,
            tf.TensorSpec([], tf.int32, name="max_new_tokens"),
            tf.TensorSpec([], tf.int32, name="num_beams"),
            tf.TensorSpec([], tf.float32, name="length_penalty"),
        ],
        autograph=False,
    )
    def translate_with_options(sources, max_new_tokens, num_beams, length_penalty):
        tf.debugging.assert_positive(
            max_new_tokens, message="max_new_tokens must be positive"
        )
        tf.debugging.Assert(
            (num_beams == 1) | (num_beams == width),
            [f"num_beams must be 1 or {width} (this export's widths). Received:",
             num_beams],
        )  # fmt: skip
        rows = graph_text.tokenize(tokenizer, sources)
        settings = decoding.settings(tf.shape(sources)[0], stops)

        def dense(ids):  # tf.cond's branches return tensors, not ragged ones
            return ids.to_tensor(default_value=-1), ids.row_lengths()

        tokens, lengths = tf.cond(
            num_beams == 1,
            lambda: dense(decoder.decode(rows, max_new_tokens, settings)),
            lambda: dense(decoder.beam(rows, max_new_tokens, settings, length_penalty)),
        )
        ids = tf.RaggedTensor.from_tensor(tokens, lengths=lengths)
        texts = graph_text.detokenize(tokenizer, decoding.drop(ids, stops))
        return {"texts": texts}

    @tf.function(input_signature=[SOURCES], autograph=False)
    def translate(sources):
        return translate_with_options(
            sources, tf.constant(max_new_tokens, tf.int32),
            tf.constant(num_beams, tf.int32), tf.constant(length_penalty, tf.float32),
        )  # fmt: skip

    return {"translate": translate, "translate_with_options": translate_with_options}
