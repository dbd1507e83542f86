"""The fortunes classifier and MiniLM in LiteRT, float32 and int8, against Keras.

Converts both presets with `keras_tfm.export.export_litert`, runs the
`.tflite` files in `ai-edge-litert`'s interpreter one text at a time (as a
device would), and prints for the classifier the test split's accuracy
and the top-1 agreement with Keras, for the encoder the largest difference
and the smallest cosine to Keras' embeddings.

    python benchmarks/litert_fortunes.py [--texts N] [--out folder]
"""

import argparse
import tempfile
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from keras_tfm import export, zoo
from keras_tfm.datasets import fortune_splits


def run_tflite(path, packed):
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    ids = packed["token_ids"].numpy().astype("int32")
    mask = packed["padding_mask"].numpy().astype("int32")
    rows = [
        next(
            iter(
                runner(token_ids=ids[i : i + 1], padding_mask=mask[i : i + 1]).values()
            )
        )
        for i in range(len(ids))
    ]
    return np.concatenate(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=None, help="first N test texts")
    parser.add_argument("--out", default=None, help="where to keep the .tflite files")
    args = parser.parse_args()
    folder = args.out or tempfile.mkdtemp()
    splits = fortune_splits(seed=0)
    texts, labels = splits["test"]
    texts, labels = list(texts)[: args.texts], list(labels)[: args.texts]

    classifier = zoo.from_preset("fortunes_classifier")
    # The split's label ids as the classifier's class indices.
    order = {name: i for i, name in enumerate(classifier.class_names)}
    labels = np.array([order[splits["class_names"][label]] for label in labels])
    packed = classifier.preprocessor(texts)
    keras_p = np.asarray(classifier(packed, training=False))
    print(f"fortunes test split: {len(texts)} texts")
    print(f"keras float32: accuracy {np.mean(keras_p.argmax(1) == labels):.4f}")
    for quantization in ("float32", "int8"):
        path = f"{folder}/fortunes_{quantization}.tflite"
        size = export.export_litert(classifier, path, quantization)
        start = time.perf_counter()
        probabilities = run_tflite(path, packed)
        seconds = time.perf_counter() - start
        print(
            f"litert {quantization}: {size / 1e6:.1f} MB, accuracy "
            f"{np.mean(probabilities.argmax(1) == labels):.4f}, top-1 agreement "
            f"{np.mean(probabilities.argmax(1) == keras_p.argmax(1)):.4f}, "
            f"max |p - keras p| {np.abs(probabilities - _softmax(keras_p)).max():.2e}, "
            f"{1000 * seconds / len(texts):.1f} ms/text"
        )

    encoder = zoo.from_preset("all_minilm_l6_v2")
    sample = texts[:200]
    packed = encoder.preprocessor(sample)
    keras_e = np.asarray(encoder(packed, training=False))
    for quantization in ("float32", "int8"):
        path = f"{folder}/minilm_{quantization}.tflite"
        size = export.export_litert(encoder, path, quantization)
        embeddings = run_tflite(path, packed)
        cosine = (embeddings * keras_e).sum(1) / np.linalg.norm(embeddings, axis=1)
        print(
            f"minilm litert {quantization}: {size / 1e6:.1f} MB, {len(sample)} texts, "
            f"max |e - keras e| {np.abs(embeddings - keras_e).max():.2e}, "
            f"min cosine {cosine.min():.4f}"
        )


def _softmax(logits):
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


if __name__ == "__main__":
    main()
