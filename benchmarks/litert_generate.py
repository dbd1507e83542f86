"""A generative model through the LiteRT converter: what converts, what runs.

Three attempts on kjv_gpt, each with builtin ops only, then with
`SELECT_TF_OPS`; prints the converter's errors (deduplicated) or the file
size, and runs what converts in `ai-edge-litert`'s interpreter, comparing
its ids with `model.generate`:

- "strings": the `generate` signature of `export_saved_model`;
- "ragged ids": ids in, ids out through `decoding.Decoder` (ragged rows),
  written by Keras' `ExportArchive` tracking the whole task;
- "dense ids": the model's loop called directly on a fixed-size buffer,
  tracking only the backbone (no tokenizer tables).

    nice -n 10 python benchmarks/litert_generate.py
"""

import tempfile

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the string graph's ops)

from keras_tfm import export, zoo
from keras_tfm.export import decoding
from keras_tfm.generation import loops

PROMPT, NEW, BUFFER = 8, 8, 64


def attempt(label, folder, key, model, prompt_ids):
    for ops in (["TFLITE_BUILTINS"], ["TFLITE_BUILTINS", "SELECT_TF_OPS"]):
        converter = tf.lite.TFLiteConverter.from_saved_model(folder, [key])
        converter.target_spec.supported_ops = [getattr(tf.lite.OpsSet, o) for o in ops]
        try:
            flatbuffer = converter.convert()
        except Exception as error:  # the converter's message is the result
            lines = [line for line in str(error).splitlines() if "rror" in line]
            print(f"{label} {ops}: FAILED\n  " + "\n  ".join(dict.fromkeys(lines[:12])))
            continue
        print(f"{label} {ops}: converted, {len(flatbuffer) / 1e6:.1f} MB")
        if prompt_ids is None:
            continue
        from ai_edge_litert.interpreter import Interpreter

        try:
            runner = Interpreter(model_content=flatbuffer).get_signature_runner()
            got = runner(token_ids=prompt_ids)["token_ids"][0].tolist()
            want = model.generate([prompt_ids[0].tolist()], NEW)[0]
            print(f"  ran: {got[PROMPT:]} (model.generate: {want[PROMPT:]})")
        except Exception as error:
            print(f"  interpreter FAILED: {str(error)[:400]}")


def main():
    model = zoo.from_preset("kjv_gpt")
    ids = [int(i) for i in model.preprocessor.tokenizer("In the beginning God created")]
    prompt = np.array([(ids * PROMPT)[:PROMPT]], "int32")
    folder = tempfile.mkdtemp()
    export.export_saved_model(model, folder + "/strings", max_new_tokens=NEW,
                              signatures=["generate"])  # fmt: skip
    attempt("strings", folder + "/strings", "generate", model, None)

    decoder = decoding.Decoder(model)
    stops = decoding.default_stops(model)
    loop = loops.decode_function(model)

    def ragged_ids(token_ids):
        rows = tf.RaggedTensor.from_tensor(token_ids)
        out = decoder.decode(rows, tf.constant(NEW), decoding.settings(1, stops))
        return {"token_ids": out.to_tensor(default_value=-1)}

    def dense_ids(token_ids):
        tokens = tf.pad(token_ids, [[0, 0], [0, BUFFER - PROMPT]])
        mask = tf.sequence_mask([PROMPT], BUFFER)
        out = loop((), tokens, mask, tf.constant(PROMPT), tf.constant(PROMPT + NEW),
                   decoding.settings(1, stops))  # fmt: skip
        return {"token_ids": out["tokens"][:, : PROMPT + NEW]}

    spec = [tf.TensorSpec([1, PROMPT], tf.int32)]
    for label, function, tracked in (
        ("ragged ids", ragged_ids, model),
        ("dense ids", dense_ids, model.backbone),
    ):
        archive = keras.export.ExportArchive()
        archive.track(tracked)
        archive.add_endpoint("generate_ids", function, input_signature=spec)
        path = tempfile.mkdtemp()
        archive.write_out(path, verbose=False)
        attempt(label, path, "generate_ids", model, prompt)


if __name__ == "__main__":
    main()
