"""keras-tfm's caches: where they live, their keys, corrupt entries, clearing;
and the interactive chat that pays the start once.

The converted-model cache is checked through `load_gguf_llama` on a tiny
GGUF file; TensorFlow's persistent XLA cache in two fresh processes (XLA
reads its flags once per process).
"""

import doctest
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_tfm import cli, runtime
from keras_tfm.cli import main
from keras_tfm.convert import converted_cache, gguf_llama
from keras_tfm.lite import user_cache
from tests.convert.tiny_gguf import write_tiny_llama


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(folder))
    return folder


def test_cache_directory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_TFM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache.cache_directory() == tmp_path / "xdg" / "keras-tfm"
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache.cache_directory() == tmp_path / "mine"
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", "off")
    assert user_cache.cache_directory() is None
    assert runtime.use_persistent_xla_cache() is None


def test_cache_key_changes_with_every_version_and_field(monkeypatch):
    base = user_cache.cache_key(source="abc", settings={"n": 1})
    assert base == user_cache.cache_key(settings={"n": 1}, source="abc")
    assert base != user_cache.cache_key(source="abd", settings={"n": 1})
    assert base != user_cache.cache_key(source="abc", settings={"n": 2})
    for package in ("keras-tfm", "tensorflow", "keras"):
        other = {**user_cache.versions(), package: "0.0.0-other"}
        monkeypatch.setattr(user_cache, "versions", lambda other=other: other)
        assert base != user_cache.cache_key(source="abc", settings={"n": 1})
        monkeypatch.undo()


def test_file_sha256_is_remembered_per_file_version(cache, tmp_path, monkeypatch):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x" * 10_000)
    want = hashlib.sha256(path.read_bytes()).hexdigest()
    assert user_cache.file_sha256(path) == want
    # The second call reads the remembered digest: it does not open the file.
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda p, *a, **k: (
            pytest.fail("hashed again")
            if str(p) == str(path)
            else real_open(p, *a, **k)
        ),
    )
    assert user_cache.file_sha256(path) == want
    monkeypatch.undo()
    path.write_bytes(b"y" * 10_000)  # same size, new modification time
    os.utime(path, ns=(1, 1))
    assert user_cache.file_sha256(path) == hashlib.sha256(b"y" * 10_000).hexdigest()


@pytest.mark.parametrize("damage", ["truncate", "garble", "unlisted", "manifest"])
def test_drop_unsealed_deletes_what_the_manifest_does_not_vouch_for(tmp_path, damage):
    good, bad = tmp_path / "good.pb", tmp_path / "bad.pb"
    good.write_bytes(b"a" * 100)
    bad.write_bytes(b"b" * 100)
    user_cache.seal(tmp_path, ["good.pb", "bad.pb"])
    if damage == "truncate":
        bad.write_bytes(b"b" * 50)
    elif damage == "garble":  # same size, one byte changed
        bad.write_bytes(b"b" * 49 + b"c" + b"b" * 50)
    elif damage == "unlisted":
        bad.unlink()
        user_cache.seal(tmp_path, ["good.pb"])
        bad.write_bytes(b"b" * 100)
    else:
        (tmp_path / user_cache.MANIFEST).write_text("{not json")
    kept = user_cache.drop_unsealed(tmp_path, "*.pb")
    assert not bad.exists()
    assert good.exists() is (damage != "manifest")
    assert set(kept) == ({"good.pb"} if damage != "manifest" else set())


def test_persistent_xla_cache_flag_and_its_key(cache, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    monkeypatch.setattr(runtime.atexit, "register", lambda *args: None)
    folder = runtime.use_persistent_xla_cache()
    assert folder.parent == cache / "xla" and folder.is_dir()
    assert os.environ["TF_XLA_FLAGS"] == (
        f"--tf_xla_auto_jit=0 --tf_xla_persistent_cache_directory={folder}"
    )
    # Set already (by the user or an earlier call): left alone.
    assert runtime.use_persistent_xla_cache() is None
    other = runtime.xla_cache_folder(cache, "--xla_cpu_prefer_vector_width=256", [])
    assert other != runtime.xla_cache_folder(cache, "", [])


XLA_RUN = textwrap.dedent(
    """
    import tensorflow as tf
    import keras_tfm  # noqa: F401

    @tf.function(jit_compile=True)
    def f(x):
        return tf.sin(x) @ tf.transpose(x) + 1.0

    print(float(tf.reduce_sum(f(tf.ones((8, 8))))))
    """
)


@pytest.mark.slow  # two fresh processes that import TensorFlow
def test_xla_cache_persists_and_survives_a_garbled_entry(cache):
    env = dict(os.environ, KERAS_TFM_CACHE_DIR=str(cache), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_XLA_FLAGS", None)

    def run():
        done = subprocess.run(
            [sys.executable, "-c", XLA_RUN], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return float(done.stdout.split()[-1])

    want = 64 * (np.sin(1.0) * 8 + 1.0)
    assert run() == pytest.approx(want, rel=1e-6)
    (folder,) = (cache / "xla").iterdir()
    (entry,) = folder.glob(runtime.XLA_CACHE_FILES)
    assert user_cache.verify(folder, [entry.name])  # sealed at exit
    data = bytearray(entry.read_bytes())
    data[len(data) // 3 : len(data) // 3 + 64] = b"\xff" * 64
    entry.write_bytes(bytes(data))
    # TensorFlow alone stops with a DataLossError on this file; the entry is
    # deleted before it reads it, compiled again and sealed again.
    assert run() == pytest.approx(want, rel=1e-6)
    assert user_cache.verify(folder, [entry.name])


@pytest.fixture
def tiny_gguf(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path, seed=5)
    return path


def _entries(cache):
    return sorted((cache / "converted").iterdir())


IDS = np.array([[5, 200, 17, 90, 261, 3]])


def test_converted_gguf_is_cached_and_read_back(cache, tiny_gguf, monkeypatch):
    first = gguf_llama.load_gguf_llama(tiny_gguf)
    (entry,) = _entries(cache)
    monkeypatch.setattr(
        gguf_llama, "open_gguf", lambda path: pytest.fail("parsed again")
    )
    second = gguf_llama.load_gguf_llama(tiny_gguf)
    np.testing.assert_array_equal(np.asarray(first(IDS)), np.asarray(second(IDS)))
    prompt = first.tokenizer.apply_chat_template("hello world")
    assert second.tokenizer.apply_chat_template("hello world") == prompt
    np.testing.assert_array_equal(second.tokenizer(prompt), first.tokenizer(prompt))
    assert second.tokenizer.end_token_id == first.tokenizer.end_token_id
    assert _entries(cache) == [entry]


def test_a_stale_key_reads_another_entry(cache, tiny_gguf, monkeypatch):
    gguf_llama.load_gguf_llama(tiny_gguf)
    gguf_llama.load_gguf_llama(tiny_gguf, max_sequence_length=16)  # another setting
    assert len(_entries(cache)) == 2
    monkeypatch.setattr(converted_cache, "CONVERTER_VERSION", 10**6)
    gguf_llama.load_gguf_llama(tiny_gguf)
    assert len(_entries(cache)) == 3
    # Another file (same path, other bytes): a new key, its own weights.
    write_tiny_llama(tiny_gguf, seed=6)
    os.utime(tiny_gguf, ns=(2, 2))
    model = gguf_llama.load_gguf_llama(tiny_gguf)
    assert len(_entries(cache)) == 4
    fresh = gguf_llama.convert_gguf(tiny_gguf, None)[2]["token_embedding/embeddings"]
    np.testing.assert_array_equal(
        model.backbone.get_layer("token_embedding").embeddings.numpy(), fresh
    )


@pytest.mark.parametrize("damage", ["truncate", "garble", "entry"])
def test_a_corrupt_entry_is_converted_again(cache, tiny_gguf, damage):
    want = np.asarray(gguf_llama.load_gguf_llama(tiny_gguf)(IDS))
    (entry,) = _entries(cache)
    if damage == "entry":
        target = entry / converted_cache.ENTRY_FILE
    else:
        target = max(entry.glob("*.npy"), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-8:] = b"\x7f" * 8
    target.write_bytes(bytes(data))
    assert converted_cache.read_entry(tiny_gguf, _settings()) is None
    assert not entry.exists()  # deleted, not read
    np.testing.assert_array_equal(
        np.asarray(gguf_llama.load_gguf_llama(tiny_gguf)(IDS)), want
    )
    assert user_cache.verify(entry)  # written again


def _settings():
    return {"loader": "gguf_llama", "max_sequence_length": None, "weights": "float32"}


def test_unwritable_cache_is_not_fatal(tmp_path, tiny_gguf, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(blocker / "cache"))
    assert isinstance(gguf_llama.load_gguf_llama(tiny_gguf), gguf_llama.CausalLM)


def test_cache_command_info_and_clear(cache, tiny_gguf, capsys):
    gguf_llama.load_gguf_llama(tiny_gguf)
    main(["cache", "info"])
    shown = capsys.readouterr().out
    assert str(cache) in shown and "converted: 1 entries" in shown
    assert json.loads((_entries(cache)[0] / "entry.json").read_text())["arguments"]
    main(["cache", "clear"])
    assert not cache.exists()
    assert f"removed {cache}" in capsys.readouterr().out
    main(["cache", "info"])
    assert "converted" not in capsys.readouterr().out


@pytest.mark.parametrize("module", [user_cache, converted_cache, runtime])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_chat_without_a_message_converses_from_a_session(tiny_gguf, monkeypatch):
    model = gguf_llama.load_gguf_llama(tiny_gguf)
    monkeypatch.setattr(cli.loading, "language_model", lambda *args, **kwargs: model)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n\nworld\n"))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    main(["chat", "--max-new-tokens", "3"])
    # Each answer streamed, one line per turn: the stateless chat's answer
    # to the conversation so far (the REPL answers from its session's cache).
    first = "".join(model.chat("hello", max_new_tokens=3, stream=True))
    history = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.strip()},
        {"role": "user", "content": "world"},
    ]
    second = "".join(model.chat(history, max_new_tokens=3, stream=True))
    assert out.getvalue() == f"{first}\n{second}\n"



def test_cache_info_says_where_its_folder_comes_from(tmp_path, monkeypatch, capsys):
    from keras_tfm.cli import main

    monkeypatch.delenv("KERAS_TFM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    main(["cache", "info"])
    assert "(the default)" in capsys.readouterr().out
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(tmp_path / "mine"))
    main(["cache", "info"])
    assert "(set by KERAS_TFM_CACHE_DIR)" in capsys.readouterr().out


def test_a_cache_folder_that_is_a_file_is_refused_at_once(
    tmp_path, monkeypatch, capsys
):
    from keras_tfm.launcher import main

    file = tmp_path / "not_a_folder"
    file.write_text("mine")
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(file))
    assert main(["chat", "Hi"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"keras-tfm: {user_cache.unusable_cache_directory()}"]
    assert str(file) in said[0] and file.read_text() == "mine"  # left as it was
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(tmp_path / "new"))
    assert user_cache.unusable_cache_directory() is None
