"""Exported `generate` against `model.generate`: SmolLM2 tokens/s, batch 1 and 8.

Exports smollm2_135m_instruct with `keras_tfm.export.export_saved_model`,
loads it with `tf.saved_model.load` in this process, and times greedy
generation of `--max-new-tokens` tokens for the same prompts through the
SavedModel's `generate` signature and through `model.generate`, each after
a warm-up call (which compiles), the median of `--repeats` calls. Both give
the same texts (checked), so they do the same work; tokens/s counts
the new tokens actually decoded. It prints where the export's time went (each
signature's tracing, then writing the SavedModel).

    nice -n 10 python benchmarks/export_generate.py [--max-new-tokens 32] [--repeats 3]
"""

import argparse
import statistics
import tempfile
import time

import tensorflow as tf

from keras_tfm import export, zoo

QUESTIONS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a bicycle works.",
    "List the planets of the solar system.",
    "What makes bread rise?",
    "Describe the water cycle.",
    "Give me three tips for learning a language.",
    "Why is the sky blue?",
    "How do bees make honey?",
]
# In SmolLM2's chat format (ChatML), as text: raw questions make the instruct
# model end at once, and both sides must decode tokens to be compared.
PROMPTS = [
    f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n" for q in QUESTIONS
]


def timed(function, repeats):
    function()  # warm-up: traces and compiles
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = zoo.from_preset("smollm2_135m_instruct")
    folder = tempfile.mkdtemp() + "/smollm2"
    start, steps = time.perf_counter(), {}
    size = export.export_saved_model(
        model, folder, max_new_tokens=args.max_new_tokens, timings=steps
    )
    print(f"export: {time.perf_counter() - start:.0f} s, {size / 1e6:.0f} MB; "
          + ", ".join(f"{name} {s:.0f} s" for name, s in steps.items()))  # fmt: skip
    generate = tf.saved_model.load(folder).signatures["generate"]
    print(
        "| batch | new tokens | model.generate tokens/s "
        "| exported generate tokens/s | ratio |"
    )
    print("|---|---|---|---|---|")
    for batch in (1, 8):
        prompts = PROMPTS[:batch]
        python_s, python_texts = timed(
            lambda p=prompts: model.generate(p, args.max_new_tokens), args.repeats
        )
        export_s, export_texts = timed(
            lambda p=prompts: generate(prompts=tf.constant(p))["texts"], args.repeats
        )
        same = [t.decode() for t in export_texts.numpy()] == python_texts
        # The new tokens actually decoded (a row stops at its end token,
        # often before max_new_tokens): the prompt's ids subtracted from the
        # text's, both tokenized alike.
        tokens = sum(
            len(model.tokenizer(text)) - len(model.tokenizer(prompt))
            for prompt, text in zip(prompts, python_texts, strict=True)
        )
        print(
            f"| {batch} | {tokens} | {tokens / python_s:.1f} "
            f"| {tokens / export_s:.1f} | {python_s / export_s:.2f} |"
            + ("" if same else " (texts differ!)")
        )


if __name__ == "__main__":
    main()
