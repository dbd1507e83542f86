"""Saves, or compares with saved ones, the outputs a refactor must not change.

Logits of every shipped preset with weights on fixed token ids (full pass,
cached prefill and decoding steps), and outputs and gradients of small models
long enough for the tiled attention and feed-forward paths, one per
activation; and the generated ids of every generating preset in every
decoding mode (`generated`: greedy, seeded sampling, beam search, a
keras-hub sampler object, streamed, speculative, scores and top
log-probabilities, stop strings, a sliding window, batches of prompts of
different lengths). Presets without weights get seeded random ones.
`compare` checks each array with `np.array_equal` (bit for bit).

    python tools/check_preset_logits.py save /tmp/before.npz
    python tools/check_preset_logits.py compare /tmp/before.npz
    python tools/check_preset_logits.py compare /tmp/before.npz --part generated
"""

import argparse
import sys

import numpy as np


def _ids(seed, batch, length, vocabulary_size, pad_from=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocabulary_size, size=(batch, length)).astype("int32")
    if pad_from is not None:
        ids[-1, pad_from:] = 0
    return ids


def _causal_lm(model, ids, out, prefix):
    out[f"{prefix}/logits"] = model(ids)
    batch, length = ids.shape
    cache = model.empty_cache(batch, length + 3)
    padding = np.ones((batch, length + 3), bool)
    logits, cache = model.call_with_cache(ids, cache, 0, padding_mask=padding)
    out[f"{prefix}/prefill"] = logits
    token = ids[:, -1:]
    for step in range(3):
        logits, cache = model.call_with_cache(
            token, cache, length + step, padding_mask=padding
        )
        out[f"{prefix}/step{step}"] = logits


def _seq2seq(model, source, target, out, prefix):
    out[f"{prefix}/logits"] = model({"source_ids": source, "target_ids": target})


def presets(out):
    from keras_tfm import zoo

    kjv = zoo.from_preset("kjv_gpt")
    _causal_lm(kjv, _ids(0, 2, 40, kjv.vocabulary_size), out, "kjv_gpt")
    classifier = zoo.from_preset("fortunes_classifier")
    vocabulary = classifier.backbone.vocabulary_size
    out["fortunes_classifier/logits"] = classifier(_ids(1, 3, 30, vocabulary, 20))
    translator = zoo.from_preset("translator_de_en")
    vocabulary = translator.vocabulary_size
    _seq2seq(translator, _ids(2, 2, 25, vocabulary, 18),
             _ids(3, 2, 20, vocabulary), out, "translator_de_en")  # fmt: skip
    minilm = zoo.from_preset("all_minilm_l6_v2")
    out["all_minilm_l6_v2/embeddings"] = minilm.encode(["In the beginning", "God"])
    smollm = zoo.from_preset("smollm2_135m_instruct")
    _causal_lm(smollm, _ids(4, 1, 12, smollm.vocabulary_size), out, "smollm2")


def _random_weights(model):
    rng = np.random.default_rng(6)
    model.set_weights(
        [rng.normal(size=w.shape).astype("float32") * 0.3 for w in model.weights]
    )


def tiled(out, length=1100):
    import tensorflow as tf

    from keras_tfm import models

    for activation in ("relu", "gelu", "gelu_approximate", "silu", "swiglu"):
        model = models.CausalLM(models.DecoderBackbone(
            vocabulary_size=50, num_layers=1, num_heads=4, num_key_value_heads=2,
            hidden_dim=16, intermediate_dim=32, max_sequence_length=length + 8,
            activation=activation, position_encoding="rotary", dropout=0.0,
        ))  # fmt: skip
        ids = _ids(5, 2, length, 50, length - 100)
        model(ids[:, :4])
        _random_weights(model)
        with tf.GradientTape() as tape:
            logits = model(ids)
            loss = tf.reduce_sum(tf.sin(logits))
        prefix = f"tiled_{activation}"
        out[f"{prefix}/logits"] = logits
        for weight, grad in zip(
            model.trainable_weights,
            tape.gradient(loss, model.trainable_weights),
            strict=True,
        ):
            out[f"{prefix}/grad/{weight.path}"] = grad
        if activation == "swiglu":
            _causal_lm(model, ids, out, prefix + "_cached")
    model = models.Seq2SeqLM(models.Seq2SeqBackbone(
        vocabulary_size=50, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=length + 8, activation="gelu",
    ))  # fmt: skip
    source, target = _ids(7, 2, length, 50, 900), _ids(8, 2, 30, 50)
    _seq2seq(model, source[:, :4], target[:, :4], {}, "build")
    _random_weights(model)
    _seq2seq(model, source, target, out, "tiled_cross")


GENERATING = (
    "gpt_nano", "gpt_tiny", "gpt_micro", "gpt_mini", "gpt_small", "kjv_gpt",
    "translator_de_en", "translator_es_en", "transformer_tiny",
    "smollm2_135m_instruct",
)  # fmt: skip
QUICK = ("gpt_small", "smollm2_135m_instruct")
"""Presets whose every new mode compiles for tens of seconds: greedy and
streamed only."""
MEDIUM = ("gpt_micro", "gpt_mini", "translator_es_en")
"""Presets that skip the modes the smallest ones already cover (a sampler
object, a third beam width, streamed sampling, the sliding window)."""


def _padded(rows):
    """Ragged int rows as one (batch, longest) array padded with -1."""
    rows = [[int(t) for t in row] for row in rows]
    out = np.full((len(rows), max(map(len, rows))), -1, "int64")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _streamed(pieces):
    """The per-row ids of `generate(..., stream=True)` over a list of rows."""
    rows = None
    for step in pieces:
        rows = rows or [[] for _ in step]
        for row, piece in zip(rows, step, strict=True):
            if piece is not None:
                row.append(piece)
    return rows


def _generated(name, model, out):
    import keras_hub

    vocabulary = model.backbone.vocabulary_size
    rng = np.random.default_rng(9)
    prompts = [rng.integers(3, vocabulary, size=n).tolist() for n in (5, 9)]
    n = 12
    key = f"generated/{name}"

    def save(mode, rows):
        out[f"{key}/{mode}"] = _padded(rows)

    save("greedy", model.generate(prompts, n))
    save("greedy_one", [model.generate(prompts[1], n)])
    save("streamed", _streamed(model.generate(prompts, n, stream=True)))
    if name in QUICK:
        return
    ids, scores, top = model.generate(prompts, n, return_scores=True, top_logprobs=3)
    save("scored", ids)
    for i, row in enumerate(scores):
        out[f"{key}/scores{i}"] = np.asarray(row, "float32")
        out[f"{key}/top{i}"] = np.asarray(top[i], "float64")
    samplers = {
        "random": dict(sampler="random", temperature=0.8, seed=3),
        "top_k": dict(sampler="top_k", top_k=4, temperature=1.3, seed=4),
        "top_p": dict(sampler="top_p", top_p=0.8, temperature=0.9, seed=5),
        "penalties": dict(repetition_penalty=1.3, no_repeat_ngram_size=2),
    }
    for mode, kwargs in samplers.items():
        save(mode, model.generate(prompts, n, **kwargs))
    save("beam2", model.generate(prompts, n, sampler="beam", num_beams=2))
    if not hasattr(model, "decoder_start_id"):
        save("speculative", model.generate(prompts, n, draft="prompt_lookup"))
    full = name not in MEDIUM
    if full:
        save("top_k_streamed", _streamed(model.generate(
            prompts, n, stream=True, **samplers["top_k"]
        )))  # fmt: skip
        save("beam3_penalty", model.generate(
            prompts, n, sampler="beam", num_beams=3, length_penalty=0.6
        ))  # fmt: skip
        save("greedy_object", model.generate(
            prompts, n, sampler=keras_hub.samplers.GreedySampler()
        ))  # fmt: skip
        save("top_k_object", model.generate(
            prompts, n, sampler=keras_hub.samplers.TopKSampler(k=4, seed=1), seed=7
        ))  # fmt: skip
    length = model.backbone.max_sequence_length
    if (
        full
        and model.backbone.position_encoding in ("rotary", "sinusoidal")
        and (length <= 256)
    ):
        long = [rng.integers(3, vocabulary, size=length - 4).tolist(), prompts[0]]
        save("sliding", model.generate(long, n, window_shift=length // 4))
        save("sliding_streamed", _streamed(model.generate(
            long, n, stream=True, window_shift=length // 4
        )))  # fmt: skip
    if model.preprocessor is not None:
        texts = ["In the beginning God", "And he said"]
        if hasattr(model, "decoder_start_id"):
            texts = ["Das ist gut.", "Wo ist der Hund?"]
            if name == "translator_es_en":
                texts = ["El perro es bueno.", "Hola"]
        for mode, kwargs in {
            "text": {}, "text_stop": dict(stop_strings=["e", " the"]),
        }.items():  # fmt: skip
            out[f"{key}/{mode}"] = np.array(model.generate(texts, n, **kwargs))
            pieces = model.generate(texts, n, stream=True, **kwargs)
            joined = ["".join(p) for p in zip(*pieces, strict=True)]
            out[f"{key}/{mode}_streamed"] = np.array(joined)


def generated(out, names=GENERATING, done=None):
    """Every mode of each preset in `names`; `done(out)` after each one (the
    save writes what there is so far, so that a stopped run keeps it)."""
    import time

    from keras_tfm import zoo

    for name in names:
        began = time.perf_counter()
        try:
            model = zoo.from_preset(name)
        except Exception as error:  # SmolLM2 needs its installed package
            print(f"skipped {name}: {error}")
            continue
        if hasattr(model, "decoder_start_id") and model.preprocessor is None:
            model.start_token_id = model.start_token_id or 1  # transformer_tiny
        if zoo.preset_weights(name) == "none":
            rng = np.random.default_rng(10)
            model.set_weights([
                rng.normal(size=w.shape).astype(w.dtype) * 0.3 for w in model.weights
            ])  # fmt: skip
        _generated(name, model, out)
        print(f"generated {name}: {time.perf_counter() - began:.0f} s", flush=True)
        if done is not None:
            done(out)


PARTS = {"presets": presets, "tiled": tiled, "generated": generated}


def _arrays(out):
    return {k: np.asarray(v) for k, v in out.items()}


def compute(parts=tuple(PARTS), presets=None, done=None):
    out = {}
    for part in parts:
        if part == "generated":
            generated(out, presets or GENERATING, done)
        else:
            PARTS[part](out)
    return _arrays(out)


def _in_parts(key, parts):
    part = "generated" if key.startswith("generated/") else (
        "tiled" if key.startswith(("tiled", "build")) else "presets"
    )  # fmt: skip
    return part in parts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["save", "compare"])
    parser.add_argument("path")
    parser.add_argument(
        "--part", choices=list(PARTS), action="append",
        help="only these parts (default: all); compare checks only their arrays",
    )  # fmt: skip
    parser.add_argument(
        "--preset", choices=GENERATING, action="append",
        help="generated: only these presets (compare checks only theirs)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    parts = tuple(args.part or PARTS)
    done = None
    if args.mode == "save":

        def done(out):
            np.savez(args.path, **_arrays(out))

    arrays = compute(parts, args.preset, done)
    if args.mode == "save":
        np.savez(args.path, **arrays)
        print(f"saved {len(arrays)} arrays to {args.path}")
        return 0
    saved = np.load(args.path)
    files = [
        k for k in saved.files if _in_parts(k, parts)
        and (not args.preset or not k.startswith("generated/")
             or k.split("/")[1] in args.preset)
    ]  # fmt: skip
    differ = [k for k in files if k not in arrays
              or not np.array_equal(saved[k], arrays[k])]  # fmt: skip
    missing = sorted(set(arrays) - set(saved.files))
    for key in differ:
        if key in arrays and saved[key].shape != arrays[key].shape:
            print(f"DIFFERS {key}: shape {saved[key].shape} -> {arrays[key].shape}")
        elif key in arrays and saved[key].dtype.kind in "fiu":
            diff = np.max(np.abs(saved[key].astype("float64") - arrays[key]))
            print(f"DIFFERS {key}: max abs {diff:.3g}")
        elif key in arrays:
            print(f"DIFFERS {key}: {saved[key]!r} -> {arrays[key]!r}")
        else:
            print(f"MISSING {key}")
    print(f"{len(files) - len(differ)}/{len(files)} arrays "
          f"bit-identical; {len(missing)} new")  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
