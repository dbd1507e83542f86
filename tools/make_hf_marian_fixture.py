"""Writes a tiny random HuggingFace Marian checkpoint and its reference outputs.

Run once, with a Python that has PyTorch, transformers and sentencepiece
(keras_tfm is not needed; the test suite itself does not need PyTorch):

    pip install torch==2.13.0            # always pin: unpinned is a CUDA build
    pip install transformers==5.23.0 sentencepiece==0.2.3 safetensors
    python tools/make_hf_marian_fixture.py

(the committed fixture was made with `/work/torchenv/bin/python`: torch
2.13.0+cpu, transformers 5.23.0, sentencepiece 0.2.3, without sacremoses).

It needs the Debian package trans-de-en (/usr/share/trans/de-en): German and
English sentences from it train one small SentencePiece unigram model per
side (source.spm on German, target.spm on English, as an opus-mt-de-en
checkpoint has). vocab.json is Marian's joint vocabulary: "</s>" 0, "<unk>"
1, the pieces of both models in an order unrelated to either model's own ids,
"<pad>" last. A `MarianMTModel` (2 + 2 layers, d_model 32, swish, scaled
embeddings, tied shared embeddings) gets random weights and a random
`final_logits_bias`, and is saved as safetensors.

Writes tests/fixtures/tiny_marian_hf/ (config.json, model.safetensors,
source.spm, target.spm, vocab.json, tokenizer_config.json, ...) and
tests/fixtures/tiny_marian_reference.npz with
- `texts` and `MarianTokenizer`'s ids of each (`ids_<i>`, source side, with
  "</s>"); `decoded_<i>`: its decoding (target side, special tokens
  skipped) of `target_ids_<i>`, the target-side ids of the same text;
- `source_ids` (two texts, the shorter padded with "<pad>"),
  `decoder_input_ids` (starting with the decoder start token, "<pad>") and
  transformers' float32 `encoder_outputs` and `logits` for them;
- `greedy`: `generate(num_beams=1, do_sample=False, max_new_tokens=12)` on
  `source_ids` (rows start with the decoder start token, and are filled with
  "<pad>" after "</s>"); `float64_gap`: transformers' float32 logits'
  largest difference from its own float64 run (the rounding floor).
"""

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece
import torch
import transformers

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
DIRECTORY = FIXTURES / "tiny_marian_hf"
CORPUS = Path("/usr/share/trans/de-en")
# Varied German and English: umlauts and ß, numbers, punctuation, casing,
# runs of spaces, full-width letters (NFKC folds them), a language code, and
# characters neither SentencePiece model knows (emoji, CJK).
TEXTS = [
    "Das ist doch nicht möglich.",
    "Haben Sie etwas gegen Sonnenbrand?",
    "That really isn't possible.",
    "Die Straße ist 3,5 km lang; wir gehen um 14:30 Uhr los!",
    "Grüße aus München, Köln und Zürich.",
    "  zwei  Leerzeichen   und ein Tab\tda",
    "ＶＯＬＬＥ Breite und ﬁ Ligatur",
    "Emoji 😀 und 東京 sind unbekannt",
    ">>deu<< Ein Satz mit Sprachcode.",
    "ALLES GROSS, alles klein, Gemischt.",
]


def sentence_pairs():
    """Aligned (German, English) sub-entries that are whole sentences."""
    if not CORPUS.exists():
        raise SystemExit("Install the Debian package trans-de-en first.")
    pairs = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or " :: " not in line:
            continue
        german, english = line.split(" :: ", 1)
        german, english = german.split(" | "), english.split(" | ")
        if len(german) != len(english):
            continue
        for de, en in zip(german, english, strict=True):
            de, en = (re.sub(r"\s*[{\[][^}\]]*[}\]]", "", s).strip() for s in (de, en))
            if re.fullmatch(r"[A-ZÄÖÜ].{15,90}[.?!]", de) and en[-1:] in ".?!":
                pairs.append((de, en))
    return pairs[:800]


def train_spm(lines, path, vocab_size):
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(path.with_suffix("")),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=0.9995,
        normalization_rule_name="nmt_nfkc",
        num_threads=1,
        minloglevel=2,
    )
    path.with_suffix(".model").rename(path)
    path.with_suffix(".vocab").unlink()


def joint_vocabulary(source, target):
    """Marian's vocab.json: both models' pieces, not in either's id order."""
    control = {"<unk>", "<s>", "</s>"}
    pieces = []
    for spm in (source, target):
        pieces += [spm.IdToPiece(i) for i in range(spm.GetPieceSize())]
    pieces = sorted({p for p in pieces if p not in control})
    rng = np.random.default_rng(0)
    pieces = [pieces[i] for i in rng.permutation(len(pieces))]
    return {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)},
            "<pad>": len(pieces) + 2}  # fmt: skip


def make_tokenizer():
    pairs = sentence_pairs()
    print(f"{len(pairs)} sentence pairs from {CORPUS}")
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    train_spm([de for de, _ in pairs], DIRECTORY / "source.spm", 240)
    train_spm([en for _, en in pairs], DIRECTORY / "target.spm", 200)
    source = sentencepiece.SentencePieceProcessor(str(DIRECTORY / "source.spm"))
    target = sentencepiece.SentencePieceProcessor(str(DIRECTORY / "target.spm"))
    vocabulary = joint_vocabulary(source, target)
    (DIRECTORY / "vocab.json").write_text(json.dumps(vocabulary, indent=2) + "\n")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(DIRECTORY / "source.spm"),
        target_spm=str(DIRECTORY / "target.spm"),
        vocab=str(DIRECTORY / "vocab.json"),
        source_lang="de",
        target_lang="en",
    )
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        for name in ("tokenizer_config.json",):
            (DIRECTORY / name).write_text((Path(tmp) / name).read_text())
    return transformers.MarianTokenizer.from_pretrained(DIRECTORY)


def make_model(tokenizer):
    pad = tokenizer.pad_token_id
    config = transformers.MarianConfig(
        vocab_size=len(tokenizer.encoder),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:
                continue  # the fixed sinusoidal table
            # Scales (found by trying) large enough that greedy choices are
            # not near-ties and vary along the output rather than repeat one
            # token, small enough that float32 rounding stays far below the
            # 1e-4 tolerance (transformers' own float32 vs float64 gap is
            # printed): norm biases small, the shared embedding larger.
            scale = 0.5 if "shared" in name else 0.2
            if "layer_norm" in name and name.endswith("bias"):
                scale = 0.02
            noise = torch.randn(parameter.shape, generator=generator) * scale
            if "layer_norm" in name:
                parameter.copy_((1.0 if name.endswith("weight") else 0.0) + noise)
            else:
                parameter.copy_(noise)
        bias = torch.randn(model.final_logits_bias.shape, generator=generator)
        model.final_logits_bias.copy_(0.1 * bias)
    model.save_pretrained(DIRECTORY)
    return transformers.MarianMTModel.from_pretrained(
        DIRECTORY, dtype=torch.float32
    ).eval()


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    tokenizer = make_tokenizer()
    model = make_model(tokenizer)
    pad = tokenizer.pad_token_id
    outputs = {"texts": np.array(TEXTS)}
    for i, text in enumerate(TEXTS):
        outputs[f"ids_{i}"] = np.array(tokenizer(text)["input_ids"], "int32")
        target = tokenizer(text_target=text)["input_ids"]
        outputs[f"target_ids_{i}"] = np.array(target, "int32")
        outputs[f"decoded_{i}"] = np.array(
            tokenizer.decode(target, skip_special_tokens=True)
        )
    batch = tokenizer([TEXTS[3], TEXTS[0]], padding=True, return_tensors="pt")
    source_ids = batch["input_ids"]
    rng = np.random.default_rng(2)
    decoder_input_ids = rng.integers(0, pad, (2, 9))
    decoder_input_ids[:, 0] = pad
    with torch.no_grad():
        result = model(
            input_ids=source_ids,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=torch.tensor(decoder_input_ids),
        )
        greedy = model.generate(
            input_ids=source_ids,
            attention_mask=batch["attention_mask"],
            num_beams=1,
            do_sample=False,
            max_new_tokens=12,
        )
    logits = result.logits.numpy()
    with torch.no_grad():
        exact = model.double()(
            input_ids=source_ids,
            attention_mask=batch["attention_mask"],
            decoder_input_ids=torch.tensor(decoder_input_ids),
        ).logits.numpy()
    float64_gap = float(np.abs(exact - logits).max())
    print(f"transformers float32 vs float64 logits: {float64_gap:.2e}")
    top2 = np.sort(logits, axis=-1)[..., -2:]
    print(f"smallest top-1 margin {np.min(top2[..., 1] - top2[..., 0]):.2e}")
    print("greedy:", greedy.tolist())
    np.savez_compressed(
        FIXTURES / "tiny_marian_reference.npz",
        source_ids=source_ids.numpy().astype("int32"),
        decoder_input_ids=decoder_input_ids.astype("int32"),
        encoder_outputs=result.encoder_last_hidden_state.numpy().astype("float32"),
        logits=logits.astype("float32"),
        greedy=greedy.numpy().astype("int32"),
        float64_gap=np.float32(float64_gap),
        **outputs,
    )
    print(f"wrote {DIRECTORY} and its reference", file=sys.stderr)


if __name__ == "__main__":
    main()
