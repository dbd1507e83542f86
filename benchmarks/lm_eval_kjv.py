"""lm-evaluation-harness against `keras-tfm serve`, beside `CausalLM.score`.

A small local multiple-choice task (`benchmarks/lm_eval_kjv/`): the first
half of a King James verse, and four second halves to choose from, the
verse's own and three of other verses. lm-eval's `local-completions`
model asks the server for each choice's log-likelihood (`echo`,
`logprobs`, token-id prompts, its "remote" tokenizer on /tokenize); this
script recomputes the same numbers with `CausalLM.score` in this process,
on the contexts and continuations lm-eval logged, and prints both.

    python benchmarks/lm_eval_kjv.py make          # the questions (committed)
    keras-tfm serve smollm2_135m_instruct --port 8011 --max-context 256 &
    HF_DATASETS_OFFLINE=1 /tmp/lmeval/bin/lm_eval --model local-completions \\
        --model_args model=smollm2_135m_instruct,base_url=http://127.0.0.1:8011/v1/completions,tokenizer_backend=remote,max_length=256 \\
        --tasks kjv_endings --include_path benchmarks/lm_eval_kjv \\
        --log_samples --output_path /tmp/lmeval_out
    python benchmarks/lm_eval_kjv.py compare /tmp/lmeval_out

lm-eval needs torch (not a keras-tfm dependency): install it in a venv of
its own, e.g. `python3 -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install
"lm-eval[api]" torch` (a CPU torch wheel is enough).
"""  # noqa: E501

import argparse
import glob
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent / "lm_eval_kjv"
QUESTIONS = HERE / "kjv_endings.jsonl"


def make(count=20, seed=0, verses="john1:1-21:25"):
    """Writes `count` questions from `verses`: context, 4 choices, answer."""
    from keras_tfm.datasets.bible import load_bible

    lines = [v for v in load_bible(verses).splitlines() if 14 <= len(v.split()) <= 30]
    rng = random.Random(seed)
    picked = rng.sample(lines, 4 * count)
    with QUESTIONS.open("w", encoding="utf-8") as out:
        for i in range(count):
            halves = []
            for verse in picked[4 * i : 4 * i + 4]:
                words = verse.split()
                cut = len(words) // 2
                halves.append((" ".join(words[:cut]), " ".join(words[cut:])))
            context, ending = halves[0]
            choices = [ending] + [end for _, end in halves[1:]]
            rng.shuffle(choices)
            row = {"context": context, "choices": choices,
                   "answer": choices.index(ending)}  # fmt: skip
            out.write(json.dumps(row) + "\n")
    print(f"wrote {count} questions to {QUESTIONS}")


def encode_pair(tokenize, context, continuation):
    """lm-eval's split of a causal LM's request (`_encode_pair`): trailing
    spaces move to the continuation; the whole is tokenized and the
    context's tokens cut off its front."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenize(context + continuation)
    context_ids = tokenize(context)
    return context_ids, whole[len(context_ids) :]


def compare(output_path, preset):
    """lm-eval's logged log-likelihoods beside `CausalLM.score`'s."""
    import numpy as np

    from keras_tfm import zoo

    (samples,) = glob.glob(f"{output_path}/**/samples_kjv_endings_*.jsonl",
                           recursive=True)  # fmt: skip
    model = zoo.from_preset(preset)

    def tokenize(text):
        return [int(i) for i in model.preprocessor.generate_preprocess([text])[0]]

    served, scored, right, same = [], [], {"lm-eval": 0, "score": 0}, 0
    rows = [json.loads(line) for line in open(samples, encoding="utf-8")]
    for row in rows:
        # lm-eval's log: {"gen_args_i": {"arg_0": context, "arg_1": choice}}.
        pairs = [(a["arg_0"], a["arg_1"]) for a in row["arguments"].values()]
        split = [encode_pair(tokenize, c, continuation) for c, continuation in pairs]
        # One pass per question: each context + choice, and each context.
        likelihoods, _ = model.score(
            [c + choice for c, choice in split] + [c for c, _ in split]
        )
        ours = (likelihoods[: len(split)] - likelihoods[len(split) :]).tolist()
        served += [float(response[0][0]) for response in row["resps"]]
        scored += ours
        logged = [float(r[0][0]) for r in row["resps"]]
        right["lm-eval"] += int(np.argmax(logged) == int(row["target"]))
        right["score"] += int(np.argmax(ours) == int(row["target"]))
        same += int(np.argmax(logged) == np.argmax(ours))
        print(f"question {row['doc_id']}: lm-eval {np.round(logged, 4).tolist()}, "
              f"score {np.round(ours, 4).tolist()}", flush=True)  # fmt: skip
    difference = np.abs(np.subtract(served, scored))
    print(f"questions: {len(rows)}, choices: {len(served)}, the same choice: {same}")
    for name, count in right.items():
        print(f"accuracy ({name}): {count}/{len(rows)} = {count / len(rows):.2f}")
    print(f"largest |lm-eval - score| of a choice's log-likelihood: "
          f"{difference.max():.2e} (mean {difference.mean():.2e})")  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("make", help="write the questions")
    compared = commands.add_parser("compare", help="lm-eval's samples vs score")
    compared.add_argument("output_path", help="lm-eval's --output_path")
    compared.add_argument("--model", default="smollm2_135m_instruct")
    args = parser.parse_args()
    if args.command == "make":
        make()
    else:
        compare(args.output_path, args.model)


if __name__ == "__main__":
    main()
