"""What the serving slots' top-20 alternatives cost a SmolLM2 decoding step.

`keras-tfm serve` computes each step's 20 most likely tokens for every slot
(OpenAI's `top_logprobs` limit), whether or not a request asked for them:
a top-k over SmolLM2's 49,152 logits per slot inside the compiled call.
This times one `SlotDecoder.decode` call (8 slots, greedy) with
`top_logprobs=0` and with 20, interleaved, and prints the medians.

    nice -n 10 python benchmarks/serve_top_logprobs.py --repeats 30
"""

import argparse
import statistics
import time

from keras_tfm import zoo
from keras_tfm.generation.continuous_batching import SlotDecoder


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    model = zoo.from_preset("smollm2_135m_instruct")
    decoders = {
        k: SlotDecoder(model, args.slots, args.max_length, top_logprobs=k)
        for k in (0, 20)
    }
    tokens, positions = [17] * args.slots, [100 + 7 * i for i in range(args.slots)]
    for decoder in decoders.values():  # compile
        decoder.decode(tokens, positions)
    times = {k: [] for k in decoders}
    for _ in range(args.repeats):
        for k, decoder in decoders.items():
            start = time.perf_counter()
            decoder.decode(tokens, positions)
            times[k].append(time.perf_counter() - start)
    base = statistics.median(times[0])
    print(f"| top_logprobs | median ms per step ({args.slots} slots) | vs 0 |")
    print("|---|---|---|")
    for k, values in times.items():
        median = statistics.median(values)
        print(f"| {k} | {1000 * median:.1f} | {median / base:.3f}x |")


if __name__ == "__main__":
    main()
