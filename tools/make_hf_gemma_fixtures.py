"""Writes a tiny random Gemma 2 checkpoint and its reference outputs.

Run once, as tools/make_hf_decoder_fixtures.py is run (a Python with
keras_tfm, torch and transformers; it reuses that tool's texts and
checks):

    python tools/make_hf_gemma_fixtures.py                 # the HF folder
    python tools/make_hf_gemma_fixtures.py --gguf \
        --llama-cpp .../vendor/llama.cpp \
        --torch-python /work/torchenv/bin/python \
        --llama-python /work/lcpenv/bin/python          # and its GGUF files

tests/fixtures/tiny_gemma2_hf/ gets config.json and model.safetensors made
by transformers' `Gemma2ForCausalLM` with random weights, and Gemma's
tokenizer files: tokenizer.model, a SentencePiece BPE model trained here
as Gemma's is set up (byte fallback, no dummy prefix, identity
normalization, <pad> <eos> <bos> <unk> at ids 0-3, <start_of_turn> and
<end_of_turn> and <mask> user-defined), and tokenizer_config.json with the real
Gemma 2's chat template (tests/fixtures/chat_templates.json). The config
sets what Gemma 2 has and a tiny model must make visible: soft caps small
enough to bend these logits, `query_pre_attn_scalar` unlike head_dim, a
sliding window (as long as the context, so every layer attends alike).
tests/fixtures/tiny_gemma2_reference.npz holds what
make_hf_decoder_fixtures.references writes.

With `--gguf`, llama.cpp's converter writes the folder as
tests/fixtures/gguf/tiny_gemma2_{f32,q8_0}.gguf and
tests/fixtures/gguf/tiny_gemma2_llama_cpp.npz gets llama.cpp's logits and
token ids (tools/make_gguf_fixtures.py's LOGITS). llama.cpp scales Gemma 2
queries by head_dim ** -0.5 whatever `query_pre_attn_scalar` says (the
file has no such key; only the 27B model's hidden / heads is known to it),
so its logits here differ from transformers': the GGUF loader follows
llama.cpp.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sentencepiece  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from make_hf_decoder_fixtures import (  # noqa: E402
    FIXTURES,
    TRAINING_TEXT,
    randomize,
    references,
)

from keras_tfm.convert.gemma import load_hf_gemma, save_hf_gemma  # noqa: E402

# Gemma's user-defined pieces ("<mask>" is one transformers' GemmaTokenizer
# adds when the model lacks it).
USER_DEFINED = ["<mask>", "<start_of_turn>", "<end_of_turn>"]


def train_gemma_tokenizer(directory, vocab_size):
    """tokenizer.model and tokenizer_config.json, as Gemma's are set up."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT),
        model_prefix=str(directory / "tokenizer"),
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=USER_DEFINED,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", minloglevel=2,
    )  # fmt: skip
    (directory / "tokenizer.vocab").unlink()
    templates = json.loads((FIXTURES / "chat_templates.json").read_text())
    settings = {
        "tokenizer_class": "GemmaTokenizer",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": False,
        "chat_template": templates["gemma2"]["template"],
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    return transformers.AutoTokenizer.from_pretrained(directory)


def make_gemma2():
    directory = FIXTURES / "tiny_gemma2_hf"
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_gemma_tokenizer(directory, 400)
    config = transformers.Gemma2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        sliding_window=64,
        query_pre_attn_scalar=16,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )
    torch.manual_seed(80)
    model = transformers.Gemma2ForCausalLM(config).eval()
    randomize(model, seed=80)
    model.save_pretrained(directory)
    references(
        "gemma2", model, tokenizer, directory, load_hf_gemma,
        lambda m, d: save_hf_gemma(m, d), seed=81,
    )  # fmt: skip


def make_gemma2_gguf(args):
    import numpy as np
    from make_gguf_fixtures import CONVERT, LOGITS

    folder = FIXTURES / "gguf"
    files = {}
    for out_type in ("f32", "q8_0"):
        target = folder / f"tiny_gemma2_{out_type}.gguf"
        arguments = [str(FIXTURES / "tiny_gemma2_hf"), "--outtype", out_type,
                     "--outfile", str(target)]  # fmt: skip
        code = CONVERT.format(
            llama_cpp=str(args.llama_cpp), pre="default", patch="", arguments=arguments
        )
        subprocess.run([args.torch_python, "-c", code], check=True, cwd=args.llama_cpp)
        files[out_type] = str(target)
    reference = np.load(FIXTURES / "tiny_gemma2_reference.npz")
    texts = [str(text) for text in reference["texts"]]
    out = folder / "tiny_gemma2_llama_cpp.npz"
    payload = json.dumps([files, reference["token_ids"][:2].tolist(), texts, str(out)])
    subprocess.run([args.llama_python, "-c", LOGITS, payload], check=True)
    print(f"wrote {sorted(files.values())} and {out.name}", file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", action="store_true")
    parser.add_argument("--llama-cpp", type=Path)
    parser.add_argument("--torch-python")
    parser.add_argument("--llama-python")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if args.gguf:
        make_gemma2_gguf(args)
    else:
        make_gemma2()
