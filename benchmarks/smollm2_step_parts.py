"""Where a SmolLM2-135M batch-1 decoding step spends its time.

Times greedy decoding (batch 1, prompt 16, float32, XLA) of models with
SmolLM2-135M's configuration and random weights, three ways: as it is;
with a 512-token vocabulary (so the logits' 49,152 x 576 matrix drops
out); and with tiny matrices (hidden 72, FFN 64, vocabulary 512: what is
left is the fixed cost of 30 layers of ops). A token's time is the
difference between 72 and 8 new tokens over 64, median of 5 calls, so
the prompt's prefill and the call's overhead cancel. Beside each: the
float32 weights those parts read per token over their time (GB/s), and
the NumPy copy bandwidth.

    python benchmarks/smollm2_step_parts.py
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from run import copy_bandwidth, weight_bytes  # noqa: E402

from keras_tfm.convert import load_gguf_llama  # noqa: E402
from keras_tfm.models import CausalLM  # noqa: E402
from keras_tfm.zoo.smollm2 import smollm2_gguf_path  # noqa: E402


def ms_per_token(config, repeats=5):
    """Milliseconds per new token at batch 1, and the model's weight bytes."""
    model = CausalLM.from_config(config)
    prompt = np.random.default_rng(0).integers(1, 512, (1, 16)).tolist()
    medians = {}
    for new_tokens in (8, 72):
        model.generate(prompt, new_tokens, stop_token_ids=[])  # compiles
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model.generate(prompt, new_tokens, stop_token_ids=[])
            times.append(time.perf_counter() - start)
        medians[new_tokens] = statistics.median(times)
    return 1e3 * (medians[72] - medians[8]) / 64, weight_bytes(model)


def main():
    print(f"NumPy copy bandwidth: {copy_bandwidth():.1f} GB/s, XLA_FLAGS "
          f"{os.environ.get('XLA_FLAGS', '')!r}")  # fmt: skip
    config = load_gguf_llama(smollm2_gguf_path(), max_sequence_length=1024)
    config = config.get_config()
    small_vocabulary = dict(config, vocabulary_size=512)
    tiny = dict(small_vocabulary, hidden_dim=72, intermediate_dim=64)
    full_ms, full_bytes = ms_per_token(config)
    layers_ms, layers_bytes = ms_per_token(small_vocabulary)
    fixed_ms, _ = ms_per_token(tiny)
    logits_bytes = full_bytes - layers_bytes
    rows = [
        ("whole step", full_ms, full_bytes),
        ("30 layers (vocabulary 512)", layers_ms, layers_bytes),
        ("logits' matrix (difference)", full_ms - layers_ms, logits_bytes),
        ("30 layers' weights (less the fixed cost)", layers_ms - fixed_ms,
         layers_bytes),
        ("fixed cost: tiny matrices", fixed_ms, None),
    ]  # fmt: skip
    print("| part | ms per token | float32 MB read | GB/s |\n|---|---|---|---|")
    for name, ms, nbytes in rows:
        read = f"{nbytes / 1e6:.0f} | {nbytes / ms / 1e6:.1f}" if nbytes else "- | -"
        print(f"| {name} | {ms:.2f} | {read} |")


if __name__ == "__main__":
    main()
