"""Saves, or compares with saved ones, the outputs a refactor must not change.

Logits of every shipped preset with weights on fixed token ids (full pass,
cached prefill and decoding steps), and outputs and gradients of small models
long enough for the tiled attention and feed-forward paths, one per
activation. `compare` checks each array with `np.array_equal` (bit for bit).

    python tools/check_preset_logits.py save /tmp/before.npz
    python tools/check_preset_logits.py compare /tmp/before.npz
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


def compute():
    out = {}
    presets(out)
    tiled(out)
    return {k: np.asarray(v) for k, v in out.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["save", "compare"])
    parser.add_argument("path")
    args = parser.parse_args(argv)
    arrays = compute()
    if args.mode == "save":
        np.savez(args.path, **arrays)
        print(f"saved {len(arrays)} arrays to {args.path}")
        return 0
    saved = np.load(args.path)
    differ = [k for k in saved.files if k not in arrays
              or not np.array_equal(saved[k], arrays[k])]  # fmt: skip
    missing = sorted(set(arrays) - set(saved.files))
    for key in differ:
        if key in arrays:
            diff = np.max(np.abs(saved[key].astype("float64") - arrays[key]))
            print(f"DIFFERS {key}: max abs {diff:.3g}")
        else:
            print(f"MISSING {key}")
    print(f"{len(saved.files) - len(differ)}/{len(saved.files)} arrays "
          f"bit-identical; {len(missing)} new")  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
