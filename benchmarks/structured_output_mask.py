"""What structured output's mask costs a SmolLM2 decoding step.

`generate(response_format=...)` wraps the model's cached step: it moves
each row's automaton state by the last token and masks the step's logits
with the state's row of the table (`strategies.constrained.masked_step`).
This times one compiled cached step of SmolLM2-135M with and without that
wrapper (the automaton of `{"type": "json_object"}`), interleaved, and
prints the medians. The sampler after it is the same either way.

    nice -n 10 python benchmarks/structured_output_mask.py --repeats 30
"""

import argparse
import statistics
import time

import numpy as np
from keras import ops

from keras_tfm import zoo
from keras_tfm.generation import backend, grammar
from keras_tfm.generation.strategies.constrained import masked_step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    model = zoo.from_preset("smollm2_135m_instruct")
    regex = grammar.response_format_regex({"type": "json_object"})
    start = time.perf_counter()
    automaton = grammar.cached_automaton(
        model.tokenizer, model.backbone.vocabulary_size, regex,
        (model.preprocessor.end_token_id,),
    )  # fmt: skip
    print(f"automaton: {time.perf_counter() - start:.2f} s, table "
          f"{automaton.next_state.shape}")  # fmt: skip
    context = model.encoder_context(())

    def step(tokens, cache, index):
        return model.decode_step(context, tokens, cache, index)

    def masked(tokens, carried, index, mask, next_state, token_class):
        return masked_step(step, mask, next_state, token_class)(tokens, carried, index)

    functions = {
        "plain": backend.compile_loop(step),
        "masked": backend.compile_loop(masked),
    }
    batch, length = args.batch, args.max_length
    tokens = ops.convert_to_tensor(np.full((batch, length), 17, "int32"))
    cache = model.backbone.empty_cache(batch, length)
    index = ops.convert_to_tensor(length // 2, "int32")
    extra = (
        ops.convert_to_tensor(np.zeros((batch, length), bool)),
        ops.convert_to_tensor(automaton.next_state),
        ops.convert_to_tensor(automaton.token_class),
    )
    calls = {
        "plain": lambda: functions["plain"](tokens, cache, index),
        "masked": lambda: functions["masked"](
            tokens, (cache, ops.zeros((batch,), "int32")), index, *extra
        ),
    }
    for call in calls.values():  # compile
        ops.convert_to_numpy(call()[0])
    times = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            ops.convert_to_numpy(call()[0])
            times[name].append(time.perf_counter() - start)
    plain = statistics.median(times["plain"])
    masked = statistics.median(times["masked"])
    print(f"batch {batch}, {length} positions: step {plain * 1e3:.1f} ms, "
          f"masked {masked * 1e3:.1f} ms ({100 * (masked / plain - 1):+.1f}%), "
          f"medians of {args.repeats} interleaved calls")  # fmt: skip


if __name__ == "__main__":
    main()
