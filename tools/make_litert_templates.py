"""Writes the LiteRT decoding-step template of each chat preset into the zoo.

A template lets the first `keras-tfm chat` with a preset write its LiteRT
copy in seconds, without the converter (`keras_tfm.lite.decoder_template`):
`zoo/<preset>/litert_decoder/`. Run it after a change to the decoding step
(`keras_tfm.export.litert_decoder`, the layers it runs) or to TensorFlow's
converter; the slow test in `tests/export/test_litert_template.py` fails
while a kept template no longer holds for the converter as it is
(`check_decoder_template`). SmolLM2 takes about 2 minutes and 10 GB.

    python tools/make_litert_templates.py [PRESET ...]
"""

import argparse
import time

from keras_tfm.chat.entry_writer import template_folder
from keras_tfm.export.litert_template import make_decoder_template
from keras_tfm.lite import chat_entries
from keras_tfm.zoo.named_model import load_named_model

PRESETS = ("smollm2_135m_instruct",)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=PRESETS)
    for preset in parser.parse_args().presets:
        start = time.perf_counter()
        model = load_named_model(preset)
        buffer_length = chat_entries.buffer_length(model)
        folder = template_folder(preset)
        description = make_decoder_template(
            model, folder, buffer_length=buffer_length, overwrite=True
        )
        print(
            f"{folder}: {len(description['placements'])} placements, "
            f"{description['size']:,} bytes filled, "
            f"{time.perf_counter() - start:.0f} s"
        )


if __name__ == "__main__":
    main()
