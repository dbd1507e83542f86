"""Does bzip2 beat the main job by copying? The held-out verses of
`keras-tfm train` that repeat the training part, and bzip2 without them.

`keras-tfm train` holds out every tenth block of about a chapter
(`keras_tfm.training.language_model_recipe.text_split`) and prints
`bzip2 -9` given the training text beside the model, in nats per held-out
byte. If bzip2 won by copying
verses that occur (nearly) verbatim in the training part, a held-out set
without them would measure modelling, not copying. This counts the
held-out lines (verses) whose word 8-grams occur in the training part at
or above each threshold and codes what is left with bzip2, on exactly the
bytes a model would be scored on. Seconds; no model.

    python benchmarks/held_out_overlap.py
"""

import re

from keras_tfm.baselines import compression_nats_per_byte
from keras_tfm.datasets import load_default_corpus
from keras_tfm.datasets.default_corpus import GENESIS_EXODUS_VERSES
from keras_tfm.training.language_model_recipe import text_split

N = 8  # words per sequence
THRESHOLDS = (0.5, 0.8, 1.0)  # share of a verse's 8-grams seen in training


def word_ngrams(line, n=N):
    words = re.findall(r"[a-z]+", line.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def main():
    # Genesis and Exodus, the main job's text when this was measured.
    verses = load_default_corpus().splitlines(keepends=True)
    train, held_out = text_split("".join(verses[:GENESIS_EXODUS_VERSES]))
    seen = set().union(*(word_ngrams(line) for line in train.splitlines()))
    lines = held_out.splitlines(keepends=True)
    shares = []
    for line in lines:
        ngrams = word_ngrams(line)
        shares.append(len(ngrams & seen) / len(ngrams) if ngrams else 0.0)
    print(f"held-out: {len(lines)} lines, {len(held_out.encode()):,} bytes; "
          f"bzip2 -9 given the training text: "
          f"{compression_nats_per_byte(train, held_out):.4f} nats/byte")  # fmt: skip
    print(f"{'8-grams seen >=':>16} {'lines out':>9} {'bytes kept':>10} "
          f"{'bzip2 kept':>10}")  # fmt: skip
    for threshold in THRESHOLDS:
        kept = "".join(
            line for line, s in zip(lines, shares, strict=True) if s < threshold
        )
        dropped = len(lines) - sum(s < threshold for s in shares)
        print(f"{threshold:>16.0%} {dropped:>9} {len(kept.encode()):>10,} "
              f"{compression_nats_per_byte(train, kept):>10.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
