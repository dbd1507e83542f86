"""Greedy decoding loops; two logit processors stop it. Shown on kjv_gpt.

Greedy decoding of a small model falls into loops: kjv_gpt continues "And
the LORD said unto Moses" with the same clause again and again. This script
decodes the same prompts greedily three ways (plain, with
`no_repeat_ngram_size=3`: no token 3-gram twice; with
`repetition_penalty=1.2`: HF's penalty on every token already seen) and
prints each text beside the share of its word 4-grams that repeat an
earlier one (`repeated_ngram_share`), a measure of looping: 0 for text that
never repeats four words, near 1 for a text that is one phrase over and
over. The KJV itself is the yardstick: the same share over passages of the
real text as long as the generated ones (it repeats its refrains, "and the
LORD spake unto Moses, saying", so its share is not 0).

    python examples/kjv_repetition.py             # 128 new tokens, 4 prompts
    python examples/kjv_repetition.py --quick     # 32 new tokens, 1 prompt
"""

import argparse

# TensorFlow and keras_tfm are imported in `main`, after the arguments are
# parsed: `--help` answers at once.

# --- Configuration ------------------------------------------------------------
PRESET = "kjv_gpt"
PROMPTS = [
    "And the LORD said unto Moses",
    "In the beginning",
    "Blessed are the",
    "And it came to pass",
]
MAX_NEW_TOKENS = 128
SETTINGS = {  # name: the arguments of `generate` (greedy in all three)
    "plain greedy": {},
    "no_repeat_ngram_size=3": {"no_repeat_ngram_size": 3},
    "repetition_penalty=1.2": {"repetition_penalty": 1.2},
}
N = 4  # the n of the repeated n-gram share, in words
PASSAGES = 500  # real KJV passages measured for the yardstick (seeded)
# ------------------------------------------------------------------------------


def repeated_ngram_share(words, n=N):
    """The share of the n-grams of `words` that occurred earlier in it.

    Of the len(words) - n + 1 n-grams (windows of n consecutive words),
    those equal to a window starting earlier count as repeated; 0.0 when
    there is no n-gram.

    Example:
    >>> repeated_ngram_share("a b c d a b c d".split())  # 1 of 5 repeats
    0.2
    """
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    seen, repeated = set(), 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams)


def real_text_share(text, words, passages=PASSAGES, seed=0):
    """The mean share over `passages` passages of `words` words of `text`,
    starting at seeded random words."""
    import random

    tokens = text.split()
    starts = random.Random(seed).sample(range(len(tokens) - words), passages)
    shares = [repeated_ngram_share(tokens[i : i + words]) for i in starts]
    return sum(shares) / len(shares)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 tokens, 1 prompt")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from keras_tfm import zoo

    prompts = PROMPTS[:1] if args.quick else PROMPTS
    max_new_tokens = 32 if args.quick else MAX_NEW_TOKENS
    model = zoo.from_preset(PRESET)
    shares, lengths = {}, []
    for name, settings in SETTINGS.items():
        texts = model.generate(prompts, max_new_tokens, stop_token_ids=[], **settings)
        print(f"=== {name} ({max_new_tokens} new tokens, greedy)")
        row_shares = []
        for prompt, text in zip(prompts, texts, strict=True):
            words = text[len(prompt) :].split()
            share = repeated_ngram_share(words)
            row_shares.append(share)
            lengths.append(len(words))
            print(f"[repeated {N}-grams {share:.2f}] {text!r}")
        shares[name] = sum(row_shares) / len(row_shares)
    from keras_tfm.datasets import bible

    words = round(sum(lengths) / len(lengths))
    shares[f"the KJV itself ({words} words)"] = real_text_share(
        bible.load_bible(), words, 20 if args.quick else PASSAGES
    )
    print(f"\nshare of repeated word {N}-grams in the new text, mean of the prompts")
    for name, share in shares.items():
        print(f"{name:<30} {share:.3f}")
    return shares


if __name__ == "__main__":
    main()
