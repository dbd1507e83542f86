"""`export_litert`: an encoder task as a LiteRT (`.tflite`) flatbuffer.

On a device the text is tokenized by the app (LiteRT has no string ops of
tensorflow-text), so the model takes ids: `token_ids` and `padding_mask`,
int32 (1, sequence_length), packed "[CLS] text [SEP]" and padded as the
preprocessor packs them (`model.preprocessor(texts)`).
"""

import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from keras_tfm.models import EncoderClassifier, SentenceEncoder
from keras_tfm.validation import check_choice

QUANTIZATIONS = ("float32", "int8")


def export_litert(model, path, quantization="float32", sequence_length=None):
    """Writes an `EncoderClassifier` or `SentenceEncoder` as a `.tflite` file.

    Args:
        model: the task.
        path: the file to write.
        quantization: "float32", or "int8" (weights stored as int8 with
            per-channel scales, LiteRT's dynamic-range quantization).
        sequence_length: the input length (default the preprocessor's,
            else the backbone's `max_sequence_length`).

    Returns:
        The number of bytes written.

    The model's outputs: the classifier's class probabilities (1,
    num_classes), the sentence encoder's embedding (1, hidden_dim).

    Example:
    >>> import tempfile
    >>> from keras_tfm import export, zoo
    >>> model = zoo.from_preset("fortunes_classifier")
    >>> size = export.export_litert(model, tempfile.mkdtemp() + "/f.tflite")
    >>> size > 1_000_000
    True
    """
    if not isinstance(model, EncoderClassifier | SentenceEncoder):
        raise ValueError(
            "LiteRT export takes an EncoderClassifier or a SentenceEncoder. "
            f"Received: a {type(model).__name__}"
        )
    check_choice("quantization", quantization, QUANTIZATIONS)
    if sequence_length is None:
        preprocessor = model.preprocessor
        sequence_length = getattr(preprocessor, "sequence_length", None)
        sequence_length = sequence_length or model.backbone.max_sequence_length
    spec = tf.TensorSpec([1, sequence_length], tf.int32)
    classifier = isinstance(model, EncoderClassifier)

    def serve(token_ids, padding_mask):
        inputs = {"token_ids": token_ids, "padding_mask": padding_mask > 0}
        outputs = tf.cast(model(inputs, training=False), tf.float32)
        if classifier:
            return {"probabilities": tf.nn.softmax(outputs, axis=-1)}
        return {"embeddings": outputs}

    # Through a SavedModel written by Keras' ExportArchive, which tracks the
    # model's variables so that the converter freezes them (Keras' own
    # LiteRT export takes the same path).
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", serve, input_signature=[spec, spec])
    with tempfile.TemporaryDirectory() as folder:
        archive.write_out(folder, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(folder)
        if quantization == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        flatbuffer = converter.convert()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(flatbuffer)
    return len(flatbuffer)
