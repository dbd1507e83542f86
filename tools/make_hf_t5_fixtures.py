"""Writes two tiny random HuggingFace T5 checkpoints and their reference outputs.

Run once, with a Python that has PyTorch, transformers, sentencepiece and
protobuf (keras_tfm is not needed; the test suite itself never needs PyTorch):

    python3 -m venv /tmp/t5venv
    /tmp/t5venv/bin/pip install torch transformers sentencepiece protobuf
    /tmp/t5venv/bin/python tools/make_hf_t5_fixtures.py

(the committed fixtures were made with torch 2.14.1, transformers 5.24.0,
sentencepiece 0.2.x, tokenizers 0.22+; nothing is downloaded from a hub).

A SentencePiece unigram model (T5's layout: "<pad>" 0, "</s>" 1, "<unk>" 2,
no "<s>"; identity normalization, which keeps the file small) is trained on
English and German sentences of the Debian package trans-de-en; transformers'
`T5Tokenizer` reads it (adding 4 sentinels "<extra_id_*>") and writes
tokenizer.json. Two `T5ForConditionalGeneration` models get random weights
(transformers' own T5 initialisation, seeded):

- tiny_t5_hf: T5's shape: feed_forward_proj "relu", the head tied to the
  shared embedding and the decoder output scaled by d_model ** -0.5; one
  model.safetensors;
- tiny_t5_v1_1_hf: T5 v1.1 / FLAN-T5's shape: "gated-gelu", a separate
  `lm_head` and no scaling; saved in shards (model.safetensors.index.json).

Both: d_model 16, d_kv 6 (4 heads, so inner 24 != d_model), d_ff 32, 2
encoder and 3 decoder layers, 8 buckets with max_distance 12 (the sources are
longer, so the log-spaced buckets are used), vocab_size 216 (the tokenizer
has 204 tokens: T5 pads its embedding past the tokenizer, as t5-small has
32128 for 32100).

Writes tests/fixtures/tiny_t5_reference.npz with
- `texts`, and `ids_<i>`: the tokenizer's ids of each (with "</s>");
- `buckets_bidirectional`, `buckets_causal`: transformers'
  `_relative_position_bucket` of `relative_positions` (-300 ... 300) for T5's
  32 buckets and max_distance 128;
- per shape (prefix `t5_` and `v1_1_`): `source_ids` (two texts, padded with
  "<pad>"), `attention_mask`, `decoder_input_ids` (from the decoder start,
  "<pad>"), float32 `logits`, `float64_gap` (float32 vs float64 logits: the
  rounding floor), and `greedy`: 10 greedy tokens per row by full forward
  passes (no stop at "</s>"; transformers 5.24's `generate` fails on a T5
  with more decoder than encoder layers, its cache sized by the encoder).
"""

import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece
import torch
import transformers

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CORPUS = Path("/usr/share/trans/de-en")
SPM_SIZE, EXTRA_IDS, VOCAB_SIZE = 200, 4, 216
TEXTS = [
    "translate English to German: That is not possible.",
    "summarize: The house is small, but the garden is large.",
    "Das ist doch nicht möglich.",
    "  two  spaces   and a tab\there",
    "Numbers 3,5 and 14:30, and <extra_id_0> a sentinel.",
    "Emoji 😀 and 東京 are unknown",
]


def sentences():
    if not CORPUS.exists():
        raise SystemExit("Install the Debian package trans-de-en first.")
    lines = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or " :: " not in line:
            continue
        for side in line.split(" :: ", 1):
            for part in side.split(" | "):
                part = re.sub(r"\s*[{\[][^}\]]*[}\]]", "", part).strip()
                if re.fullmatch(r"[A-ZÄÖÜ].{15,90}[.?!]", part):
                    lines.append(part)
    return lines[:1500]


def make_tokenizer(directory):
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "spiece"
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences()),
            model_prefix=str(prefix),
            vocab_size=SPM_SIZE,
            model_type="unigram",
            character_coverage=0.9995,
            normalization_rule_name="identity",
            pad_id=0,
            eos_id=1,
            unk_id=2,
            bos_id=-1,
            num_threads=1,
            minloglevel=2,
        )
        proto = prefix.with_suffix(".model").read_bytes()
        (Path(tmp) / "spiece.model").write_bytes(proto)
        tokenizer = transformers.T5Tokenizer.from_pretrained(tmp, extra_ids=EXTRA_IDS)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    (directory / "spiece.model").write_bytes(proto)  # as the hub's T5 folders
    return tokenizer


def make_model(directory, tokenizer, feed_forward_proj, tied, seed):
    config = transformers.T5Config(
        vocab_size=VOCAB_SIZE,
        d_model=16,
        d_kv=6,
        d_ff=32,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
        feed_forward_proj=feed_forward_proj,
        tie_word_embeddings=tied,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    if not tied:  # transformers 5 ties by default: give the head its own weights
        head = torch.randn(model.lm_head.weight.shape, generator=generator)
        model.lm_head.weight = torch.nn.Parameter(head)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            # Scales (found by trying) large enough that greedy choices vary
            # along the output and are not near-ties, small enough that
            # float32 rounding stays far below the tolerance (the float32 vs
            # float64 gap is printed). T5's own initialisation makes a tiny
            # model's greedy output one repeated token.
            noise = torch.randn(parameter.shape, generator=generator)
            if "layer_norm" in name:
                parameter.copy_(1.0 + 0.1 * noise)
            elif "relative_attention_bias" in name:
                parameter.copy_(noise)
            elif "shared" not in name and "lm_head" not in name:
                parameter.copy_(0.6 * noise)
    shards = {} if tied else {"max_shard_size": "30KB"}
    model.save_pretrained(directory, **shards)
    return transformers.T5ForConditionalGeneration.from_pretrained(
        directory, dtype=torch.float32
    ).eval()


def greedy_by_full_passes(model, batch, steps):
    """`steps` argmax tokens per row, each from a whole (uncached) forward pass."""
    start = model.config.decoder_start_token_id
    decoder = torch.full((batch["input_ids"].shape[0], 1), start)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(**batch, decoder_input_ids=decoder).logits[:, -1]
            decoder = torch.cat([decoder, logits.argmax(-1, keepdim=True)], dim=1)
    return decoder[:, 1:].numpy()


def references(model, tokenizer, prefix):
    batch = tokenizer([TEXTS[1], TEXTS[0]], padding=True, return_tensors="pt")
    batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
    rng = np.random.default_rng(2)
    decoder_input_ids = rng.integers(3, 200, (2, 16))
    decoder_input_ids[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        logits = model(
            **batch, decoder_input_ids=torch.tensor(decoder_input_ids)
        ).logits.numpy()
        exact = model.double()(
            **batch, decoder_input_ids=torch.tensor(decoder_input_ids)
        ).logits.numpy()
        model.float()
    greedy = greedy_by_full_passes(model, batch, 10)
    gap = float(np.abs(exact - logits).max())
    top2 = np.sort(logits, axis=-1)[..., -2:]
    print(
        f"{prefix}: float32 vs float64 {gap:.2e}, logits range "
        f"{np.ptp(logits):.2f}, smallest top-1 margin "
        f"{np.min(top2[..., 1] - top2[..., 0]):.2e}; greedy {greedy.tolist()}"
    )
    return {
        f"{prefix}source_ids": batch["input_ids"].numpy().astype("int32"),
        f"{prefix}attention_mask": batch["attention_mask"].numpy().astype("int32"),
        f"{prefix}decoder_input_ids": decoder_input_ids.astype("int32"),
        f"{prefix}logits": logits.astype("float32"),
        f"{prefix}float64_gap": np.float32(gap),
        f"{prefix}greedy": greedy.astype("int32"),
    }


def bucket_tables():
    bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    positions = torch.arange(-300, 301)
    return {
        "relative_positions": positions.numpy().astype("int32"),
        "buckets_bidirectional": bucket(positions, True, 32, 128).numpy(),
        "buckets_causal": bucket(positions, False, 32, 128).numpy(),
    }


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    t5_dir, v11_dir = FIXTURES / "tiny_t5_hf", FIXTURES / "tiny_t5_v1_1_hf"
    for directory in (t5_dir, v11_dir):
        shutil.rmtree(directory, ignore_errors=True)
    tokenizer = make_tokenizer(t5_dir)
    make_tokenizer(v11_dir)
    outputs = {"texts": np.array(TEXTS), **bucket_tables()}
    for i, text in enumerate(TEXTS):
        outputs[f"ids_{i}"] = np.array(tokenizer(text)["input_ids"], "int32")
        print(text, "->", tokenizer.convert_ids_to_tokens(outputs[f"ids_{i}"]))
    t5 = make_model(t5_dir, tokenizer, "relu", tied=True, seed=0)
    outputs.update(references(t5, tokenizer, "t5_"))
    v11 = make_model(v11_dir, tokenizer, "gated-gelu", tied=False, seed=3)
    outputs.update(references(v11, tokenizer, "v1_1_"))
    np.savez_compressed(FIXTURES / "tiny_t5_reference.npz", **outputs)
    print(f"wrote {t5_dir}, {v11_dir} and tiny_t5_reference.npz", file=sys.stderr)


if __name__ == "__main__":
    main()
