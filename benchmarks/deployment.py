"""Deployment benchmark: float32 against int8 against a distilled student.

For each trained preset present in `zoo/` with weights (fortunes_classifier,
kjv_gpt, translator_de_en; absent ones are reported and skipped), and each
variant (float32; int8 = the same preset after `model.quantize("int8")`;
for the classifier also the student of examples/distill.py when its
`student_distilled.keras` exists), it prints one markdown table:

- size: bytes of the variant saved as one `.keras` file;
- latency: median wall time of repeated calls after a warm-up call
  (classifier: one batch of 8 test texts, `predict_on_batch`; language model:
  greedy `generate` of 32 bytes after "In the beginning"; translator: greedy
  translation of 8 test sentences);
- the task metric: test accuracy (fortunes), per-byte perplexity of the
  held-out last 5% of the KJV (kjv_gpt), sacrebleu BLEU/chrF on test pairs
  (translator); for int8 also the share of greedy tokens equal to float32's.

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/deployment.py
    python benchmarks/deployment.py --quick        # fewer examples/repeats
"""

import argparse
import importlib.util
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def file_size(model):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.keras"
        model.save(path)
        return path.stat().st_size


def median_seconds(function, repeats):
    function()  # warm-up: tracing and compilation excluded
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def has_weights(name):
    return (
        name in zoo.list_presets()
        and (zoo.preset_dir(name) / "model.weights.h5").is_file()
    )


def variants(name, extra=None):
    float_model = zoo.from_preset(name)
    int8_model = zoo.from_preset(name)
    int8_model.quantize("int8")
    models = {"float32": float_model, "int8": int8_model}
    if extra is not None and Path(extra).is_file():
        models["distilled student"] = keras.models.load_model(extra)
    return models


def fortunes_rows(args):
    from keras_tfm.data.classification import classification_dataset
    from keras_tfm.datasets.fortunes import fortune_splits
    from keras_tfm.training.text_classification import predict_with_labels

    student = ROOT / "outputs" / "distill" / "student_distilled.keras"
    models = variants("fortunes_classifier", args.student or student)
    texts, labels = fortune_splits(seed=0)["test"]
    texts, labels = texts[: args.examples], labels[: args.examples]
    rows = []
    for variant, model in models.items():
        tokenizer = model.tokenizer
        dataset = classification_dataset(texts, labels, tokenizer, 32, 128)
        logits, y = predict_with_labels(model, dataset)
        x = next(iter(classification_dataset(texts[:8], labels[:8], tokenizer, 8)))[0]
        seconds = median_seconds(
            lambda model=model, x=x: model.predict_on_batch(x), args.repeats
        )
        accuracy = np.mean(logits.argmax(-1) == y)
        rows.append(
            dict(
                preset="fortunes_classifier",
                variant=variant,
                parameters=model.count_params(),
                bytes=file_size(model),
                latency_ms=1000 * seconds,
                metric=f"accuracy {accuracy:.3f} ({len(y)} test)",
            )
        )
    return rows


def kjv_rows(args):
    import keras_hub

    from keras_tfm.data.language_modeling import language_model_datasets
    from keras_tfm.datasets.bible import load_bible

    models = variants("kjv_gpt")
    tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False)
    _, validation = language_model_datasets(
        load_bible(), tokenizer, 128, 32, validation_fraction=0.05, seed=0
    )
    batches = list(validation.take(args.lm_batches))
    prompt = "In the beginning"
    greedy = {}
    rows = []
    for variant, model in models.items():
        losses = []
        for x, y in batches:
            logits = model.predict_on_batch(x)
            losses.append(
                keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True
                )
            )
        loss = float(np.mean(np.concatenate([np.ravel(v) for v in losses])))
        seconds = median_seconds(
            lambda model=model: model.generate(prompt, max_new_tokens=32), args.repeats
        )
        greedy[variant] = model.generate(
            [list(prompt.encode())] * 1, max_new_tokens=32
        )[0]
        agreement = ""
        if variant != "float32":
            same = np.mean(np.array(greedy[variant]) == np.array(greedy["float32"]))
            agreement = f", greedy tokens equal to float32: {same:.2f}"
        rows.append(
            dict(
                preset="kjv_gpt",
                variant=variant,
                parameters=model.count_params(),
                bytes=file_size(model),
                latency_ms=1000 * seconds,
                metric=f"perplexity/byte {np.exp(loss):.3f} "
                f"({len(batches) * 32 * 128} held-out bytes){agreement}",
            )
        )
    return rows


def translator_rows(args):
    from keras_tfm.datasets import trans_de_en as translation

    spec = importlib.util.spec_from_file_location(
        "translate_de_en", ROOT / "examples" / "translate_de_en.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    pairs = translation.load_translation_pairs()
    test = translation.split_translation_pairs(pairs, seed=0)[2][: args.examples]
    sources, references = [de for de, _ in test], [en for _, en in test]
    rows = []
    for variant, model in variants("translator_de_en").items():
        scores = example.score(example.translate(model, sources), references)
        seconds = median_seconds(
            lambda model=model: example.translate(model, sources[:8]), args.repeats
        )
        rows.append(
            dict(
                preset="translator_de_en",
                variant=variant,
                parameters=model.count_params(),
                bytes=file_size(model),
                latency_ms=1000 * seconds,
                metric=f"BLEU {scores['bleu']}, chrF {scores['chrf']} "
                f"({len(test)} test pairs)",
            )
        )
    return rows


SECTIONS = {
    "fortunes_classifier": fortunes_rows,
    "kjv_gpt": kjv_rows,
    "translator_de_en": translator_rows,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--presets", nargs="*", default=list(SECTIONS))
    parser.add_argument("--student", default=None, help="a distilled .keras file")
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--lm-batches", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    defaults = (100, 2, 3) if args.quick else (1000, 10, 10)
    args.examples = args.examples or defaults[0]
    args.lm_batches = args.lm_batches or defaults[1]
    args.repeats = args.repeats or defaults[2]
    start = time.time()
    rows = []
    for name in args.presets:
        if not has_weights(name):
            print(f"{name}: no preset with weights in zoo/, skipped")
            continue
        rows += SECTIONS[name](args)
    print(f"load average {os.getloadavg()[0]:.1f}, total {time.time() - start:.0f} s")
    print("| preset | variant | parameters | .keras size | latency (median) | metric |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['preset']} | {row['variant']} | {row['parameters']:,} | "
            f"{row['bytes'] / 1e6:.2f} MB | {row['latency_ms']:.1f} ms | "
            f"{row['metric']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
