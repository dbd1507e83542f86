"""Writes GGUF files of the tiny HuggingFace decoders with llama.cpp's own
converter, and llama.cpp's logits for them.

Run once from the repository root, with three things at hand (the test
suite needs none of them):

- llama.cpp's converter: `convert_hf_to_gguf.py`, `conversion/` and
  `gguf-py/` from `vendor/llama.cpp/` of PyPI's llama-cpp-python source
  package (`pip download --no-deps --no-binary :all:
  llama-cpp-python==0.3.36`), run by a Python with torch and transformers
  (`--torch-python`; tools/make_hf_decoder_fixtures.py says how to make
  one);
- llama.cpp itself: llama-cpp-python built from that source package
  (`--llama-python`, a Python where `import llama_cpp` works);
- the fixtures of tools/make_hf_decoder_fixtures.py.

    python tools/make_gguf_fixtures.py --llama-cpp /tmp/lcp/.../vendor/llama.cpp \\
        --torch-python /work/torchenv/bin/python \\
        --llama-python /work/lcpenv/bin/python

For each tiny checkpoint (tests/fixtures/tiny_<name>_hf) it writes
tests/fixtures/gguf/tiny_<name>_<type>.gguf for the converter's F32, F16
and Q8_0 outputs, and tests/fixtures/gguf/tiny_<name>_llama_cpp.npz with
llama.cpp's float32 logits of the first `ROWS` of the reference's
`token_ids` (each row evaluated from an empty context) for each file. (On
F16 and Q8_0 weights llama.cpp's CPU matmuls round the activations to the
weights' type too; on F32 ones, with the float32 key/value cache asked
for here, they do not, which makes the F32 file the exact check of the
architecture.) The npz also holds llama.cpp's token ids of the
reference's `texts` (`ids_<i>`).

The converter names a tokenizer's pre-tokenizer by the hash of its output
on a test string; the fixtures' tokenizers are trained here, so no hash is
known, and `get_vocab_base_pre` is given the name their pre-tokenizer has
(Qwen2's split: "qwen2"; GPT-2's: "gpt-2"). Each file carries the chat
template of the real model of its family (Qwen2.5's, Qwen3's, Phi-3.5's).
Names on the command line (qwen2, qwen3, phi3) remake those files only;
with none, every file is remade, the k-quant one too.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
# name -> (the pre-tokenizer the converter cannot recognise by its hash,
# the chat template the file carries: the real checkpoint's, from
# tests/fixtures/chat_templates.json).
CHECKPOINTS = {
    "qwen2": ("qwen2", "qwen2.5"),
    "qwen3": ("qwen2", "qwen3"),
    "phi3": ("gpt-2", "phi3.5"),
}
# Converter patches by name. Phi3MiniModel.set_vocab takes the byte-level
# BPE path (`_set_vocab_gpt2`) only when tokenizer_config.json names
# "GPT2Tokenizer" (as Phi-4's does) and otherwise reads a SentencePiece
# tokenizer.model; transformers 5 names the fixture's tokenizer
# "TokenizersBackend", so the BPE path is chosen here.
PATCHES = {
    "phi3": "from conversion import phi\n"
    "phi.Phi3MiniModel.set_vocab = base.TextModel._set_vocab_gpt2\n"
}
# Converter arguments by name. llama.cpp's vocabulary loader takes a file
# whose general.name contains "phi3" for Phi-3's SentencePiece vocabulary
# (it looks up "<s>", "</s>" and "<unk>" and strips the space after special
# tokens) and fails on the fixture's; this architecture's byte-level BPE
# files are Phi-4's, named "Phi 4 ...", so the file gets such a name.
ARGUMENTS = {"phi3": ["--model-name", "Tiny Phi 4 style"]}
OUT_TYPES = ("f32", "f16", "q8_0")
ROWS = 2  # of the reference's `token_ids`, evaluated by llama.cpp

CONVERT = """
import sys
sys.path.insert(0, {llama_cpp!r})
sys.path.insert(0, {llama_cpp!r} + "/gguf-py")
import convert_hf_to_gguf
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: {pre!r}
{patch}
sys.argv = ["convert_hf_to_gguf.py", *{arguments!r}]
convert_hf_to_gguf.main()
"""

LOGITS = """
import json, sys
import numpy as np
import llama_cpp
files, token_ids, texts, out = json.loads(sys.argv[1])
result = {"llama_cpp_version": np.array(llama_cpp.__version__)}
for kind, path in files.items():
    # A float32 key/value cache (llama.cpp's default is float16).
    model = llama_cpp.Llama(model_path=path, n_ctx=64, logits_all=True,
                            verbose=False, n_threads=1, type_k=0, type_v=0,
                            flash_attn=False)
    rows = []
    for row in token_ids:
        model.reset()
        model.eval(row)
        rows.append(np.array(model.scores[: len(row)], "float32"))
    result[f"logits_{kind}"] = np.stack(rows)
    # llama.cpp's tokenizer on the reference's texts (the same in each file).
    for i, text in enumerate(texts):
        ids = model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        result[f"ids_{i}"] = np.array(ids, "int32")
np.savez_compressed(out, **result)
"""


# A Qwen3 wide enough for k-quant blocks (256 weights a row): made here with
# random weights and the tiny Qwen3's tokenizer, converted at F16 and
# quantized by llama.cpp to Q4_K_M (Q4_K and Q6_K blocks), as llama.cpp's
# `llama-quantize` does.
WIDE = """
import shutil, sys
import torch, transformers
source, target = sys.argv[1:]
config = transformers.Qwen3Config(
    vocab_size=320, hidden_size=256, intermediate_size=256,
    num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
    head_dim=64, max_position_embeddings=64, tie_word_embeddings=False,
    rope_theta=1000000.0, rms_norm_eps=1e-6, bos_token_id=None,
    eos_token_id=2)
torch.manual_seed(60)
model = transformers.Qwen3ForCausalLM(config).eval()
generator = torch.Generator().manual_seed(60)
with torch.no_grad():
    for name, parameter in model.named_parameters():
        noise = torch.randn(parameter.shape, generator=generator)
        if "norm" in name:
            parameter.copy_(1.0 + 0.1 * noise)
        else:
            parameter.copy_(0.1 * noise)
model.save_pretrained(target)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{source}/{name}", f"{target}/{name}")
"""

QUANTIZE = """
import ctypes, sys
import llama_cpp
source, target = sys.argv[1:]
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
status = llama_cpp.llama_model_quantize(
    source.encode(), target.encode(), ctypes.byref(params))
sys.exit(status)
"""
K_QUANT = "q4_k_m"


def with_chat_template(name, folder):
    """A copy of the tiny checkpoint in `folder` with the real model's chat
    template in its tokenizer_config.json (the converter copies it)."""
    shutil.copytree(FIXTURES / f"tiny_{name}_hf", folder, dirs_exist_ok=True)
    templates = json.loads((FIXTURES / "chat_templates.json").read_text())
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = templates[CHECKPOINTS[name][1]]["template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    return folder


def convert(llama_cpp, torch_python, name, out_type, target, checkpoint=None):
    pre = CHECKPOINTS[name][0]
    if checkpoint is None:
        checkpoint = with_chat_template(name, Path(tempfile.mkdtemp()) / name)
    arguments = [
        str(checkpoint),
        "--outtype",
        out_type,
        "--outfile",
        str(target),
        *ARGUMENTS.get(name, []),
    ]
    code = CONVERT.format(
        llama_cpp=str(llama_cpp),
        pre=pre,
        arguments=arguments,
        patch=PATCHES.get(name, ""),
    )
    subprocess.run([torch_python, "-c", code], check=True, cwd=llama_cpp)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--torch-python", required=True)
    parser.add_argument("--llama-python", required=True)
    # Names given: those files only; none: every file, the k-quant one too.
    parser.add_argument("names", nargs="*")
    parser.add_argument("--k-quant-only", action="store_true")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(CHECKPOINTS))
    if unknown:
        parser.error(f"unknown names {unknown}; known: {list(CHECKPOINTS)}")
    import numpy as np

    folder = FIXTURES / "gguf"
    folder.mkdir(exist_ok=True)
    for name in [] if args.k_quant_only else args.names or list(CHECKPOINTS):
        files = {}
        for out_type in OUT_TYPES:
            target = folder / f"tiny_{name}_{out_type}.gguf"
            convert(args.llama_cpp, args.torch_python, name, out_type, target)
            files[out_type] = str(target)
        reference = np.load(FIXTURES / f"tiny_{name}_reference.npz")
        token_ids = reference["token_ids"][:ROWS].tolist()
        out = folder / f"tiny_{name}_llama_cpp.npz"
        texts = [str(text) for text in reference["texts"]]
        payload = json.dumps([files, token_ids, texts, str(out)])
        subprocess.run([args.llama_python, "-c", LOGITS, payload], check=True)
        print(f"{name}: wrote {sorted(files.values())} and {out.name}", file=sys.stderr)
    if args.k_quant_only or not args.names:
        make_k_quant(args, folder)


def make_k_quant(args, folder):
    """tiny_qwen3_wide_q4_k_m.gguf and llama.cpp's logits for it."""
    import numpy as np

    work = Path(tempfile.mkdtemp())
    wide = with_chat_template("qwen3", work / "source")
    subprocess.run(
        [args.torch_python, "-c", WIDE, str(wide), str(work / "wide")], check=True
    )
    f16 = work / "wide_f16.gguf"
    convert(args.llama_cpp, args.torch_python, "qwen3", "f16", f16, work / "wide")
    target = folder / f"tiny_qwen3_wide_{K_QUANT}.gguf"
    subprocess.run(
        [args.llama_python, "-c", QUANTIZE, str(f16), str(target)], check=True
    )
    reference = np.load(FIXTURES / "tiny_qwen3_reference.npz")
    out = folder / "tiny_qwen3_wide_llama_cpp.npz"
    payload = json.dumps(
        [{K_QUANT: str(target)}, reference["token_ids"][:ROWS].tolist(), [], str(out)]
    )
    subprocess.run([args.llama_python, "-c", LOGITS, payload], check=True)
    print(f"wrote {target.name} and {out.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
