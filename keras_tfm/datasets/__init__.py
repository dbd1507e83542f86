"""Corpus loaders, like `keras.datasets`: real text read from where it lies.

Each loader reads a corpus installed by a Debian package (or shipped inside
keras-tfm) and fails with a message naming the package when it is absent.
Turning the text into batches is `keras_tfm.data`'s job.

- `fortunes`: fortune cookies by category (`apt-get install fortunes`).
- `bible`: the King James Version (`apt-get install bible-kjv`).
- `trans_de_en`: German-English sentence pairs (`apt-get install trans-de-en`).
- `sword_parallel`: Spanish-English verse pairs of two SWORD Bibles
  (`apt-get install sword-text-sparv sword-text-web`, `pip install pysword`).
- `default_corpus`: the whole KJV, shipped inside the package.
- `digits`: scikit-learn's 8x8 handwritten digits as images (`digits_splits`).

Example:
>>> from keras_tfm import datasets
>>> datasets.load_default_corpus().splitlines()[0]
'In the beginning God created the heaven and the earth.'
"""

from keras_tfm.datasets.bible import load_bible
from keras_tfm.datasets.default_corpus import default_corpus_path, load_default_corpus
from keras_tfm.datasets.digits import digits_splits
from keras_tfm.datasets.fortunes import fortune_splits, load_fortunes
from keras_tfm.datasets.sword_parallel import (
    load_parallel_verses,
    split_parallel_verses,
)
from keras_tfm.datasets.trans_de_en import (
    load_translation_pairs,
    split_translation_pairs,
)

__all__ = [
    "default_corpus_path",
    "digits_splits",
    "fortune_splits",
    "load_bible",
    "load_default_corpus",
    "load_fortunes",
    "load_parallel_verses",
    "load_translation_pairs",
    "split_parallel_verses",
    "split_translation_pairs",
]
