"""transformers' SmolLM2 decoding speed, run by benchmarks/run.py in PyTorch's env.

    /work/torchenv/bin/python benchmarks/smollm2_torch.py GGUF_PATH [--compile]

Loads SmolLM2-135M-Instruct from the same GGUF file as keras-tfm
(`from_pretrained(folder, gguf_file=...)`, dequantized to float32), then
prints one JSON line: greedy new tokens/s at batch 1 and 8 (KV cache, eager,
or `torch.compile`d forward with --compile) and the time to first token of a
512-token prompt, each the median of repeats after a warm-up call.
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path


def main():
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(sys.argv[1])
    compiled = "--compile" in sys.argv
    prompt, new_tokens, repeats = (int(v) for v in sys.argv[2:5])
    torch.set_num_threads(os.cpu_count())
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    if compiled:
        model.forward = torch.compile(model.forward)
    generator = torch.Generator().manual_seed(0)
    result = {}

    def timed(ids, count):
        kwargs = dict(max_new_tokens=count, min_new_tokens=count, do_sample=False)
        with torch.inference_mode():
            out = model.generate(ids, **kwargs)  # warm-up (compilation)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                out = model.generate(ids, **kwargs)
                times.append(time.perf_counter() - start)
        return statistics.median(times), out

    vocab = model.config.vocab_size
    for batch in (1, 8):
        ids = torch.randint(1, vocab, (batch, prompt), generator=generator)
        seconds, out = timed(ids, new_tokens)
        result[f"batch {batch}"] = batch * new_tokens / seconds
        if batch == 1:
            result["tokens"] = out[0, prompt:].tolist()
    ids = torch.randint(1, vocab, (1, 512), generator=generator)
    result["ttft 512"], _ = timed(ids, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
