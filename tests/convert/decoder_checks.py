"""Checks every converted decoder family runs against its committed reference.

The references were made by tools/make_hf_decoder_fixtures.py with
transformers on PyTorch.
"""

import doctest
import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def reference(name):
    return dict(np.load(FIXTURES / f"tiny_{name}_reference.npz"))  # file closed


def check_token_ids(model, ref):
    """transformers' ids on the reference texts (without the special tokens
    its post-processor adds, which our decoder tokenizers leave out)."""
    for i, text in enumerate(ref["texts"]):
        got = np.asarray(model.tokenizer(str(text))).tolist()
        assert got == ref[f"ids_{i}"].tolist(), str(text)


def check_decoder_tokenizer(model, ref):
    """A decoder's ids as above, its decoded text, and the BOS difference."""
    check_token_ids(model, ref)
    tokenizer = model.tokenizer
    for i, text in enumerate(ref["texts"]):
        want = ref[f"ids_{i}"].tolist()
        assert tokenizer.detokenize(want) == str(ref[f"decoded_{i}"]), str(text)
        # transformers adds nothing, or the BOS token our tokenizer names.
        added = ref[f"added_ids_{i}"].tolist()
        bos = getattr(tokenizer, "start_token_id", None)
        assert added in (want, [bos, *want]), str(text)


def check_logits(model, ref, atol=1e-4):
    logits = np.asarray(model(ref["token_ids"]))
    np.testing.assert_allclose(logits, ref["logits"], atol=atol, rtol=0)


def check_greedy(model, ref):
    """transformers' greedy continuation, in a batch with a shorter prompt.

    The shorter row (padded in the batch; `padding_id` may be None) must be
    what a plain argmax loop over full forward passes gives it alone.
    """
    prompt = ref["prompt"].tolist()
    new = len(ref["greedy"]) - len(prompt)
    short = prompt[:2]
    got = model.generate(
        [prompt, short], max_new_tokens=new, sampler="greedy", stop_token_ids=[]
    )
    assert got[0] == ref["greedy"].tolist()
    alone = list(short)
    for _ in range(new):
        logits = np.asarray(model(np.array([alone], "int32")))
        alone.append(int(np.argmax(logits[0, -1])))
    assert got[1] == alone


def check_cache_equals_full_pass(model, token_ids):
    full = np.asarray(model(token_ids))
    batch, length = token_ids.shape
    cache = model.empty_cache(batch, length)
    # A prefill of 3 tokens, then one token a step.
    steps = [np.asarray(token_ids[:, :3])]
    steps += [np.asarray(token_ids[:, i : i + 1]) for i in range(3, length)]
    outputs, index = [], 0
    for step in steps:
        logits, cache = model.call_with_cache(step, cache, index)
        outputs.append(np.asarray(logits))
        index += step.shape[1]
    assert_equal_to_float32_rounding(np.concatenate(outputs, 1), full)


def assert_equal_to_float32_rounding(cached, full):
    """Cached and full-pass logits agree to a few float32 ulps of the largest.

    The two passes sum in different orders (and oneDNN blocks its matmuls
    differently on different CPUs), so the bound scales with the logits; a
    wrong cache position or mask moves them by tenths, not 1e-5.
    """
    atol = 1e-5 * max(1.0, float(np.abs(full).max()))
    np.testing.assert_allclose(cached, full, atol=atol, rtol=0)


def check_same_weights(a, b):
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def copy_fixture(name, tmp_path, rename=None, drop=None, add=None):
    folder = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / f"tiny_{name}_hf", folder)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors = {(rename(k) if rename else k): v for k, v in tensors.items()}
    if drop:
        del tensors[drop]
    tensors.update(add or {})
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def edit_json(folder, name, **changes):
    path = folder / name
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def run_docstring_examples(functions, globs):
    """doctest's results for the examples of `functions` only (a family
    module's HuggingFace and GGUF examples need different fixtures)."""
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for function in functions:
        examples = {**function.__globals__, **globs}
        for test in doctest.DocTestFinder().find(function, globs=examples):
            runner.run(test)
    return runner.summarize(verbose=False)


def shard_safetensors(folder, first_shard_size=5):
    """Replaces `folder`'s model.safetensors by two shards and the index
    file transformers writes for them (model.safetensors.index.json)."""
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:first_shard_size],
        "model-00002-of-00002.safetensors": names[first_shard_size:],
    }
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / shard))
    index = {"weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder
