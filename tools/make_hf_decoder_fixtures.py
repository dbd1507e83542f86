"""Writes tiny random HuggingFace decoder checkpoints and their reference outputs.

Run once, with a Python that has both keras_tfm and PyTorch (the test suite
itself does not need PyTorch), e.g. from the repository root:

    pip install torch==2.13.0            # always pin: unpinned is a CUDA build
    pip install transformers==5.23.0 tokenizers safetensors
    python tools/make_hf_decoder_fixtures.py [NAME ...]   # default: all

(or, with torch in a separate venv, put that venv's site-packages on
sys.path after keras_tfm's: `python -c "import sys, runpy;
sys.path.append('/work/torchenv/lib/python3.11/site-packages');
runpy.run_path('tools/make_hf_decoder_fixtures.py', run_name='__main__')"`).

For each family it writes tests/fixtures/tiny_<name>_hf/ (config.json,
model.safetensors and tokenizer files, made by transformers with random
weights and a byte-level BPE trained on TRAINING_TEXT by `tokenizers`, with
the pre-tokenizer of GPT-2 (gpt2, mistral, phi3), SmolLM (llama_tied), Llama 3
(llama_gqa: Meta's Split regex, ignore_merges, a BOS post-processor) or
Qwen2 (qwen2, qwen3: its Split regex and NFC)) and
tests/fixtures/tiny_<name>_reference.npz with
- `texts`, their token ids by transformers' tokenizer without special
  tokens (`ids_<i>`) and with the ones it adds by default (`added_ids_<i>`,
  Llama 3's BOS), and its decoding of `ids_<i>` (`decoded_<i>`);
- `token_ids` (a random batch) and transformers' float32 `logits` for it;
- `prompt` ids and transformers' greedy continuation `greedy`;
- `reload_logits_gap`: the largest logit difference when the checkpoint is
  loaded by keras_tfm, written back by keras_tfm's save function and run by
  transformers again (the reverse direction, checked by transformers), and
  `keras_logits_gap`, keras_tfm's own difference from transformers.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from keras_tfm.convert import (  # noqa: E402
    load_hf_gpt2,
    load_hf_llama,
    save_hf_gpt2,
    save_hf_llama,
)

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
END_OF_TEXT = "<|endoftext|>"
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.",
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face "
    "of the deep.",
    "Machine learning models learn statistical patterns from large amounts of "
    "data, and transformers use attention to relate every token to every other.",
    "It's 3:45pm on 2023-11-23; we'll meet at 221B Baker Street, won't we?",
    "Numbers like 1,000,000 and 3.14159 and 42 appear in text too.",
    "    indented code: def f(x):\n        return x * 2\n",
    # Symbols before words, punctuation before newlines: where Llama 3's and
    # Qwen2's splits cut differently from GPT-2's.
    "(hello) [world] {code}; it's THE DOG'S: 12345, 67890.\n",
    "x=(a+b)*(c-d);\nprint(f(x))\n",
]
# Words, punctuation, contractions, numbers, whitespace runs, newlines,
# non-ASCII letters and emoji (bytes the merges never saw).
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and  two  spaces",
    "It's, we'll, they're and I'd: contractions!",
    "In 2023, 3.14159% of $1,000,000 was 31,415.90",
    "line one\nline two\n\n\ttabbed",
    "Naïve café in São Paulo, Zoë and Ångström",
    "東京は日本の首都です。 Emoji: 😀👍",
    "trailing spaces   ",
    f"two texts{END_OF_TEXT}joined",
    "12345 and 1234567 and 0.5",
    "I'M SURE YOU'LL SEE, WE'D GO",
    "many      spaces\n\n\n   and\r\nnewlines  \n",
    "def f(x):\n    return {'a': x ** 2}  # code",
    "cafe\u0301 and e\u0301te\u0301: combining accents",
    "👩\u200d💻 🎉🎉 ½ Ⅻ",
]
# The pre-tokenizers of real checkpoints' tokenizer.json: Meta's Llama 3
# (Meta-Llama-3-8B) and transformers' Qwen2Tokenizer (with an NFC normalizer).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Special tokens and (bos, eos) of each tokenizer style.
SPECIALS = {
    "llama3": (
        ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
        ("<|begin_of_text|>", "<|end_of_text|>"),
    ),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], (None, "<|im_end|>")),
}
SMOLLM_SPECIALS = (
    ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    ("<|im_start|>", "<|im_end|>"),
)
# Phi-3.5's chat tokens, its eos_token (tokenizer_config.json) and no BOS
# (its "<s>" is a SentencePiece token).
PHI3_SPECIALS = (
    ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
    (None, "<|endoftext|>"),
)


def train_tokenizer(directory, vocab_size):
    """A byte-level BPE on TRAINING_TEXT, saved with transformers' GPT-2 files."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        TRAINING_TEXT, vocab_size=vocab_size, special_tokens=[END_OF_TEXT]
    )
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        tokenizer = transformers.GPT2Tokenizer(
            vocab=f"{tmp}/vocab.json", merges=f"{tmp}/merges.txt"
        )
        tokenizer.save_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)


def train_llama_tokenizer(directory, vocab_size, style, specials=None):
    """A byte-level BPE with one of four pre-tokenizers (`style`): "gpt2",
    "smollm" (digits split first), "llama3" (Llama 3's regex split,
    ignore_merges and a BOS-adding post-processor, as Meta's tokenizer.json)
    or "qwen2" (Qwen2's regex split and NFC normalizer); `specials`:
    (special tokens, (bos, eos)), by default the style's."""
    from tokenizers import Regex, normalizers, pre_tokenizers, processors

    special, (bos, eos) = specials or SPECIALS.get(style, SMOLLM_SPECIALS)
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if style == "gpt2":
        bpe.pre_tokenizer = byte_level
    elif style == "smollm":
        digits = pre_tokenizers.Digits(individual_digits=True)
        bpe.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        split = LLAMA3_SPLIT
        if style == "qwen2":
            from transformers.models.qwen2 import tokenization_qwen2

            split = tokenization_qwen2.PRETOKENIZE_REGEX
            bpe.normalizer = normalizers.NFC()
        bpe.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    if style == "llama3":
        spec = json.loads(bpe.to_str())
        spec["model"]["ignore_merges"] = True
        bpe = tokenizers.Tokenizer.from_str(json.dumps(spec))
        bpe.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, bpe.token_to_id(bos))]
        )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=bos, eos_token=eos, unk_token=None
    )
    tokenizer.save_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)


def randomize(model, seed, scale=0.3):
    """Random weights large enough that greedy choices are not near-ties."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * scale
            if "ln" in name or "norm" in name:
                parameter.copy_((1.0 if name.endswith("weight") else 0.0) + noise)
            else:
                parameter.copy_(noise)


def hf_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits.float().numpy()


def references(name, model, tokenizer, directory, load, save, seed):
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    token_ids = rng.integers(0, vocab, (3, 16)).astype("int32")
    logits = hf_logits(model, token_ids)
    prompt = tokenizer("The quick brown fox")["input_ids"]
    with torch.no_grad():
        greedy = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )[0].numpy()
    top2 = np.sort(logits, axis=-1)[..., -2:]
    print(f"{name}: smallest top-1 margin {np.min(top2[..., 1] - top2[..., 0]):.2e}")

    ours = load(directory)
    keras_gap = float(np.abs(np.asarray(ours(token_ids)) - logits).max())
    print(f"{name}: keras_tfm vs transformers logits {keras_gap:.2e}")
    with tempfile.TemporaryDirectory() as tmp:
        save(ours, tmp)
        again = transformers.AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32
        ).eval()
        reload_gap = float(np.abs(hf_logits(again, token_ids) - logits).max())
        hf_again = transformers.AutoTokenizer.from_pretrained(tmp)
        for text in TEXTS:
            # Without the post-processor's BOS, which our tokenizers leave out.
            want = tokenizer(text, add_special_tokens=False)["input_ids"]
            if hf_again(text, add_special_tokens=False)["input_ids"] != want:
                raise AssertionError(f"saved tokenizer differs on {text!r}")
    print(f"{name}: saved by keras_tfm, run by transformers: {reload_gap:.2e}")
    if max(keras_gap, reload_gap) > 1e-4:
        raise AssertionError((keras_gap, reload_gap))

    ids = {}
    for i, text in enumerate(TEXTS):
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids[f"ids_{i}"] = np.array(plain, "int32")
        # With the special tokens transformers adds by default (a BOS).
        ids[f"added_ids_{i}"] = np.array(tokenizer(text)["input_ids"], "int32")
        ids[f"decoded_{i}"] = np.array(tokenizer.decode(plain))
    np.savez_compressed(
        FIXTURES / f"tiny_{name}_reference.npz",
        texts=np.array(TEXTS),
        token_ids=token_ids,
        logits=logits.astype("float32"),
        prompt=np.array(prompt, "int32"),
        greedy=greedy.astype("int32"),
        keras_logits_gap=np.float32(keras_gap),
        reload_logits_gap=np.float32(reload_gap),
        **ids,
    )


def make_gpt2():
    directory = FIXTURES / "tiny_gpt2_hf"
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(directory, vocab_size=320)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function="gelu_new",
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    randomize(model, seed=0)
    model.save_pretrained(directory)
    references(
        "gpt2",
        model,
        tokenizer,
        directory,
        load_hf_gpt2,
        lambda m, d: save_hf_gpt2(m, d),
        seed=1,
    )


def make_llama(name, style, seed, config_class=None, **options):
    directory = FIXTURES / f"tiny_{name}_hf"
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_llama_tokenizer(
        directory, 320, style, options.pop("specials", None)
    )
    config_class = config_class or transformers.LlamaConfig
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=options.pop("intermediate_size", 48),
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **options,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize(model, seed=seed)
    model.save_pretrained(directory)
    references(
        name,
        model,
        tokenizer,
        directory,
        load_hf_llama,
        lambda m, d: save_hf_llama(m, d),
        seed=seed + 1,
    )


def make_all():
    """name -> a function writing that fixture."""
    return {
        "gpt2": make_gpt2,
        "llama_gqa": make_llama_gqa,
        "llama_tied": make_llama_tied,
        "mistral": make_mistral,
        "qwen2": make_qwen2,
        "qwen3": make_qwen3,
        "phi3": make_phi3,
    }


def make_llama_gqa():
    # Untied head, grouped-query attention (4 query heads, 2 key/value
    # heads), no biases, a RoPE base from the config, Llama 3's tokenizer.
    make_llama(
        "llama_gqa",
        style="llama3",
        seed=10,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        rope_theta=50000.0,
        rms_norm_eps=1e-5,
    )


def make_llama_tied():
    # Tied head, one key/value head of size 16 (not hidden / heads = 8),
    # biases on every projection, SmolLM's digit split.
    make_llama(
        "llama_tied",
        style="smollm",
        seed=20,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=True,
        attention_bias=True,
        mlp_bias=True,
        rope_theta=100000.0,
        rms_norm_eps=1e-6,
    )


def make_mistral():
    # Mistral: Llama's computation under another model_type, with a sliding
    # window (32 here) that caps our max_sequence_length.
    make_llama(
        "mistral",
        style="gpt2",
        seed=30,
        config_class=transformers.MistralConfig,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        sliding_window=32,
        rope_theta=10000.0,
    )


def make_qwen2():
    # Qwen2: biases on the query, key and value projections only; Qwen2's
    # tokenizer (its regex split, NFC).
    make_llama(
        "qwen2",
        style="qwen2",
        seed=40,
        config_class=transformers.Qwen2Config,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
    )


def make_qwen3():
    # Qwen3: no biases, an RMSNorm of each head's query and key (q_norm,
    # k_norm), an explicit head_dim (its default is 128), Qwen2's tokenizer.
    make_llama(
        "qwen3",
        style="qwen2",
        seed=50,
        config_class=transformers.Qwen3Config,
        num_key_value_heads=2,
        head_dim=8,
        # Rows of 64: whole blocks of 32 for Q8_0 in every matrix.
        intermediate_size=64,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
    )


def make_phi3():
    # Phi-3: Llama's computation with fused qkv_proj and gate_up_proj, no
    # biases, untied, RoPE over whole heads, no sliding window; a GPT-2
    # style byte-level BPE (Phi-4's kind; Phi-3's own is SentencePiece).
    make_llama(
        "phi3",
        style="gpt2",
        seed=70,
        config_class=transformers.Phi3Config,
        specials=PHI3_SPECIALS,
        num_key_value_heads=2,
        # Rows of 64: whole blocks of 32 for Q8_0 in every matrix.
        intermediate_size=64,
        original_max_position_embeddings=64,
        sliding_window=None,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        pad_token_id=None,
    )


def main():
    """Writes the fixtures named on the command line (default: all)."""
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    makers = make_all()
    for name in sys.argv[1:] or list(makers):
        makers[name]()
    print(f"wrote {FIXTURES}", file=sys.stderr)


if __name__ == "__main__":
    main()
