"""Writes a GGUF file with a SentencePiece ("llama") vocabulary, and what
llama.cpp makes of it: tests/fixtures/gguf/tiny_llama_spm_q8_0.gguf and
tests/fixtures/gguf/tiny_llama_spm_llama_cpp.npz.

Llama 2, Mistral v0.1, TinyLlama, Phi-3 and Gemma GGUF files carry such a
vocabulary (`tokenizer.ggml.model` "llama": pieces, scores and token types
of a SentencePiece BPE model with byte fallback) instead of GPT-2-style
merges. The file here is llama.cpp's own conversion
(`convert_hf_to_gguf.py`) of a tiny random Llama whose tokenizer.model is a
SentencePiece BPE model trained by `sentencepiece` on
tools/make_hf_decoder_fixtures.py's TRAINING_TEXT, with Phi-3.5's chat
tokens as special added tokens and its chat template. The npz holds
llama.cpp's token ids of that tool's TEXTS and of chat prompts (special
tokens parsed), and its logits, as tools/make_gguf_fixtures.py records
them.

Run once from the repository root, with the interpreters
tools/make_gguf_fixtures.py describes:

    python tools/make_gguf_spm_fixture.py --llama-cpp .../vendor/llama.cpp \\
        --torch-python /work/torchenv/bin/python \\
        --llama-python /work/lcpenv/bin/python
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_gguf_fixtures import CONVERT, FIXTURES, LOGITS  # noqa: E402

VOCABULARY_SIZE = 400
CHAT_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# Prompts as a chat template writes them: special tokens between texts.
CHAT_TEXTS = [
    "<|user|>\nHi!<|end|>\n<|assistant|>\n",
    "<s><|system|>\nBe brief.<|end|>\n<|user|>\nThe dog?<|end|>\n<|assistant|>",
    "</s>  two spaces<|end|>end",
]

MODEL = """
import json, shutil, sys
import torch, transformers
tokenizer_folder, target, vocabulary_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = transformers.LlamaConfig(
    vocab_size=vocabulary_size, hidden_size=32, intermediate_size=64,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=64, tie_word_embeddings=False,
    rope_theta=10000.0, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
torch.manual_seed(70)
model = transformers.LlamaForCausalLM(config).eval()
generator = torch.Generator().manual_seed(70)
with torch.no_grad():
    for name, parameter in model.named_parameters():
        noise = torch.randn(parameter.shape, generator=generator) * 0.3
        parameter.copy_(1.0 + noise if "norm" in name else noise)
model.save_pretrained(target)
for name in ("tokenizer.model", "tokenizer_config.json"):
    shutil.copy(f"{tokenizer_folder}/{name}", f"{target}/{name}")
"""


def train_tokenizer(folder, training_text, template):
    """tokenizer.model (SentencePiece BPE, byte fallback, identity
    normalization, a dummy prefix) and a tokenizer_config.json that marks
    the chat tokens special, in `folder`."""
    model = folder / "tokenizer"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text),
        model_prefix=str(model),
        model_type="bpe",
        vocab_size=VOCABULARY_SIZE,
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=CHAT_TOKENS,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        minloglevel=2,
    )
    Path(f"{model}.model").rename(folder / "tokenizer.model")
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(folder / "tokenizer.model")
    )
    added = {
        str(processor.piece_to_id(token)): {"content": token, "special": True}
        for token in CHAT_TOKENS
    }
    settings = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "added_tokens_decoder": added,
        "chat_template": template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--torch-python", required=True)
    parser.add_argument("--llama-python", required=True)
    args = parser.parse_args()
    from make_hf_decoder_fixtures import TEXTS, TRAINING_TEXT

    work = Path(tempfile.mkdtemp())
    (work / "tokenizer").mkdir()
    templates = json.loads((FIXTURES / "chat_templates.json").read_text())
    train_tokenizer(work / "tokenizer", TRAINING_TEXT, templates["phi3.5"]["template"])
    checkpoint = work / "checkpoint"
    subprocess.run(
        [args.torch_python, "-c", MODEL, str(work / "tokenizer"), str(checkpoint),
         str(VOCABULARY_SIZE)],
        check=True,
    )  # fmt: skip
    target = FIXTURES / "gguf" / "tiny_llama_spm_q8_0.gguf"
    arguments = [str(checkpoint), "--outtype", "q8_0", "--outfile", str(target)]
    code = CONVERT.format(
        llama_cpp=str(args.llama_cpp), pre="default", patch="", arguments=arguments
    )
    subprocess.run([args.torch_python, "-c", code], check=True, cwd=args.llama_cpp)
    rng = np.random.default_rng(71)
    token_ids = rng.integers(0, VOCABULARY_SIZE, (2, 16)).tolist()
    out = FIXTURES / "gguf" / "tiny_llama_spm_llama_cpp.npz"
    payload = json.dumps(
        [{"q8_0": str(target)}, token_ids, TEXTS + CHAT_TEXTS, str(out)]
    )
    subprocess.run([args.llama_python, "-c", LOGITS, payload], check=True)
    with np.load(out) as written:
        arrays = dict(written)
    arrays.update(
        token_ids=np.array(token_ids, "int32"),
        texts=np.array(TEXTS + CHAT_TEXTS),
    )
    np.savez_compressed(out, **arrays)
    print(f"wrote {target.name} and {out.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
