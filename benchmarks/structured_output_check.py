"""Every structured answer of SmolLM2-135M parses and validates.

20 chat prompts ("Describe Japan as JSON.", ...) under one JSON schema with
nested objects, an array, an enum and required fields, decoded as one
batch by `generate(response_format=...)` greedily and at temperature 0.7;
each answer that ends on the end token is parsed (`json`) and validated
(`jsonschema`). Prints the counts, the time of each batch (the first
compiles the loop), how many sampled answers differ from the greedy ones,
and two answers.

    nice -n 10 python benchmarks/structured_output_check.py
"""

import argparse
import json
import time

import jsonschema

from keras_tfm import zoo

COUNTRIES = [
    "France", "Japan", "Italy", "Brazil", "Kenya", "Canada", "India", "Egypt",
    "Norway", "Chile", "Spain", "Mexico", "Germany", "Peru", "Vietnam",
    "Australia", "Nigeria", "Greece", "Argentina", "Thailand",
]  # fmt: skip
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "capital": {"type": "string", "maxLength": 24},
        "continent": {
            "enum": [
                "Africa",
                "Asia",
                "Europe",
                "North America",
                "South America",
                "Oceania",
            ]
        },  # fmt: skip
        "languages": {
            "type": "array",
            "items": {"type": "string", "maxLength": 16},
            "minItems": 1,
            "maxItems": 3,
        },  # fmt: skip
        "location": {
            "type": "object",
            "properties": {
                "coastal": {"type": "boolean"},
                "hemisphere": {"enum": ["north", "south"]},
            },
            "required": ["coastal", "hemisphere"],
        },  # fmt: skip
    },
    "required": ["name", "capital", "continent", "languages", "location"],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="smollm2_135m_instruct")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args()
    model = zoo.from_preset(args.preset)
    tokenizer = model.tokenizer
    end = model.preprocessor.end_token_id
    chat = callable(getattr(tokenizer, "apply_chat_template", None))
    texts = [f"Describe {country} as JSON." for country in COUNTRIES]
    if chat:  # an instruct model's template; else (kjv_gpt) the plain text
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": t}])
                 for t in texts]  # fmt: skip
    prompts = [[int(i) for i in tokenizer(text)] for text in texts]
    response_format = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    greedy = None
    for settings in (dict(), dict(sampler="random", temperature=0.7, seed=1)):
        start = time.perf_counter()
        rows = model.generate(
            prompts, args.max_new_tokens, response_format=response_format, **settings
        )
        seconds = time.perf_counter() - start
        ended = valid = 0
        answers = []
        for prompt, row in zip(prompts, rows, strict=True):
            new = row[len(prompt) :]
            if new and new[-1] == end:
                ended += 1
                answer = tokenizer.detokenize(new[:-1])
                jsonschema.validate(json.loads(answer), SCHEMA)  # raises if not
                valid += 1
                answers.append(answer)
        print(f"{settings or 'greedy'}: {valid} of {len(prompts)} valid "
              f"({ended} ended), {seconds:.1f} s for the batch")  # fmt: skip
        if greedy is not None:
            differ = sum(a != b for a, b in zip(rows, greedy, strict=True))
            print(f"    {differ} of {len(rows)} answers differ from the greedy ones")
        greedy = rows
        for answer in answers[:2]:
            print("   ", answer)


if __name__ == "__main__":
    main()
