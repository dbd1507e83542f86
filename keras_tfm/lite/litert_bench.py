"""LiteRT's side of `keras-tfm bench`: a decoder file timed without TensorFlow.

`keras-tfm bench` (its default `--runtime litert`) writes the model's step, then runs

    python -m keras_tfm.lite.litert_bench FILE P N REPETITIONS THREADS KERNELS

in a fresh process (as a second `keras-tfm chat` runs: no TensorFlow, no
model in memory beside the interpreter), which prints
`{"ppN": [mean, std], "tgN": [mean, std]}` tokens/s as JSON.

Example:
>>> mean, std = tokens_per_second(lambda: None, 10, 2)
>>> mean > 0 and std >= 0
True
"""

import json
import statistics
import sys
import time

import numpy as np

from keras_tfm.lite.litert_decoder import LiteRTDecoder


def tokens_per_second(run, tokens, repetitions):
    """`(mean, std)` tokens/s of `run()` over `repetitions`, after one warm-up."""
    run()
    rates = []
    for _ in range(repetitions):
        began = time.perf_counter()
        run()
        rates.append(tokens / (time.perf_counter() - began))
    spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return statistics.fmean(rates), spread


def litert_figures(path, n_prompt, n_gen, repetitions, threads, kernels="xnnpack"):
    """`{"pp<n_prompt>": (mean, std), "tg<n_gen>": ...}` tokens/s of a decoder
    file: `n_prompt` random tokens prefilled from position 0, and `n_gen`
    tokens decoded greedily one at a time after a random first token."""
    decoder = LiteRTDecoder(path, num_threads=threads, kernels=kernels)
    needed = max(n_prompt, n_gen)
    if decoder.buffer_length < needed:
        raise ValueError(
            f"{path} holds {decoder.buffer_length} positions; -p and -n need "
            f"{needed}. Received: -p {n_prompt} -n {n_gen}"
        )
    vocabulary = decoder.vocabulary_size
    rng = np.random.default_rng(0)  # random prompt tokens, as llama-bench's
    prompt = [int(t) for t in rng.integers(0, vocabulary, n_prompt)]
    first = int(rng.integers(0, vocabulary))

    def generate():
        token = first
        for index in range(n_gen):
            token = int(np.argmax(decoder.decode(token, index)))

    return {
        f"pp{n_prompt}": tokens_per_second(
            lambda: decoder.prefill(prompt, 0), n_prompt, repetitions
        ),
        f"tg{n_gen}": tokens_per_second(generate, n_gen, repetitions),
    }


def main(argv=None):
    path, *numbers, kernels = sys.argv[1:] if argv is None else argv
    try:
        figures = litert_figures(path, *(int(n) for n in numbers), kernels)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: {error}") from None
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
