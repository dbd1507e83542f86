"""What recording the top log-probabilities costs the plain greedy path.

The built-in samplers' loop records up to 20 alternatives per step under a
tensor switch (`loops.RECORDED_TOP_LOGPROBS`). A 2-layer, 64-wide decoder
with SmolLM2's 49,152-token vocabulary (where a top-k over the vocabulary
weighs most against the model's step) decodes 64 tokens after a 31-token
prompt three ways: the loop compiled without recording, the loop with the
recording switched off (every plain call now) and switched on. Medians of
interleaved calls; the three decode the same tokens.

    nice -n 10 python benchmarks/top_logprobs_cost.py
"""

import os
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_tfm.generation import GenerationConfig, loops  # noqa: E402
from keras_tfm.generation.request import GenerationRequest  # noqa: E402
from keras_tfm.models import CausalLM, DecoderBackbone  # noqa: E402

PROMPT, NEW, LENGTH = 31, 64, 128


def main(repeats=7):
    model = CausalLM(DecoderBackbone(
        vocabulary_size=49152, num_layers=2, num_heads=4, hidden_dim=64,
        intermediate_dim=128, max_sequence_length=256,
    ))  # fmt: skip
    tokens = np.zeros((1, LENGTH), "int32")
    tokens[0, :PROMPT] = np.arange(1, PROMPT + 1)
    mask = np.arange(LENGTH)[None, :] < PROMPT
    request = GenerationRequest([GenerationConfig()], NEW)
    settings = loops.loop_settings(model, request)
    recording = loops.resumable_function(model, loops.RECORDED_TOP_LOGPROBS)
    ways = {
        "compiled without recording": (loops.resumable_function(model, 0), 0),
        "recording compiled, switched off": (recording, 0),
        "recording switched on": (recording, 3),
    }

    def run(function, top):
        given = dict(settings, top_logprobs=np.int32(top))
        outputs = function((), tokens, mask, np.int32(PROMPT),
                           np.int32(PROMPT + NEW), given,
                           *loops.fresh_cache(model, tokens))  # fmt: skip
        return np.asarray(outputs["tokens"])

    decoded = [run(*way) for way in ways.values()]
    assert all((d == decoded[0]).all() for d in decoded)
    times = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            began = time.perf_counter()
            run(*way)
            times[name].append(time.perf_counter() - began)
    for name, seconds in times.items():
        print(f"{name}: {np.median(seconds) * 1000:.1f} ms for {NEW} tokens")


if __name__ == "__main__":
    main()
