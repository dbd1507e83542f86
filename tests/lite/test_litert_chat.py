"""LiteRT chat entries: a second `keras-tfm chat` that never imports TensorFlow.

On a tiny random ChatML model (the serving tests' byte-level tokenizer)
saved as a `.keras` file: the LiteRT step's logits against the Keras model's
full pass, greedy answers against `model.chat`, the command in a fresh
process, the entry's keys, a corrupt or stale entry, clearing, and what the
cache must not answer.
"""

import doctest
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_tfm.chat import entry_writer as writer
from keras_tfm.cli import build_parser, main
from keras_tfm.cli import chat as chat_cli
from keras_tfm.convert import GGUFBytePairTokenizer, converted_cache
from keras_tfm.generation import GenerationConfig
from keras_tfm.lite import (
    chat_command,
    chat_entries,
    decoding_flags,
    litert_bench,
    litert_chat,
    repl,
    stop_text,
    user_cache,
)
from keras_tfm.lite.litert_chat import LiteRTChat
from tests.builders import causal_lm
from tests.convert.tiny_gguf import MERGES, SPECIALS, TEMPLATE, tiny_vocabulary

SYSTEM = "You are tiny."
# SmolLM2's shape: a default system message inside the loop's first turn.
TEMPLATE_WITH_SYSTEM = TEMPLATE.replace(
    "{% for message in messages %}",
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != "
    "'system' %}{{ '<|im_start|>system\\n" + SYSTEM + "<|im_end|>\\n' }}{% endif %}",
)


def _tiny_chat_model(seed=3):
    tokens = tiny_vocabulary()
    tokenizer = GGUFBytePairTokenizer(
        {t: i for i, t in enumerate(tokens)}, MERGES, unsplittable_tokens=SPECIALS,
        bos_token="<|im_start|>", eos_token="<|im_end|>",
        chat_template=TEMPLATE_WITH_SYSTEM,
    )  # fmt: skip
    import keras

    keras.utils.set_random_seed(seed)
    return causal_lm(
        vocabulary_size=len(tokens), num_layers=2, num_heads=2, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=128, position_encoding="rotary",
        num_key_value_heads=1, padding_id=None, tokenizer=tokenizer,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The model, the `.keras` file it was saved to, and its built entry."""
    model = _tiny_chat_model()
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    model.save(path)
    root = tmp_path_factory.mktemp("cache")
    folder = writer.build_chat_entry(model, str(path), "float32", root)
    assert folder is not None and chat_entries.find_entry(str(path), "float32", root)
    return model, str(path), root


@pytest.fixture(scope="module")
def lite(tiny):
    _, path, root = tiny
    return LiteRTChat(*chat_entries.find_entry(path, "float32", root))


def test_litert_step_logits_equal_the_keras_model(tiny, lite):
    model, decoder = tiny[0], lite.decoder
    size, length = decoder.prefill_length, decoder.buffer_length
    ids = [int(i) for i in model.tokenizer(model.tokenizer.apply_chat_template("hi"))]
    ids = (ids * length)[:length]
    full = np.asarray(model(np.array([ids])), "float64")[0]
    # A whole chunk, a padded one of 3 tokens, then one token a call.
    whole = decoder.prefill(ids[:size], 0)
    np.testing.assert_allclose(whole, full[size - 1], atol=1e-4)
    chunk = decoder.prefill(ids[size : size + 3], size)
    np.testing.assert_allclose(chunk, full[size + 2], atol=1e-4)
    for index in range(size + 3, size + 8):
        step = decoder.decode(ids[index], index)
        np.testing.assert_allclose(step, full[index], atol=1e-4)
    # Across the window: `decode_64` reads 64 positions, `decode` all 128.
    assert decoder._windows == (64,)
    decoder.prefill(ids[:60], 0)
    for index in range(60, 70):
        step = decoder.decode(ids[index], index)
        np.testing.assert_allclose(step, full[index], atol=1e-4)
    # The buffer's last positions: no padded chunk fits, one token a call.
    decoder.prefill(ids[: length - 5], 0)
    np.testing.assert_allclose(
        decoder.prefill(ids[length - 5 :], length - 5), full[-1], atol=1e-4
    )
    with pytest.raises(ValueError, match="fit the buffer of 128 positions"):
        decoder.prefill(ids[:6], length - 5)


@pytest.mark.slow  # a LiteRT conversion in a second process
def test_the_background_process_converts_after_replacing_itself(tiny, lite, tmp_path):
    # As `keras-tfm chat` starts it: the step saved, then the process becomes
    # `--convert` (os.execv) to convert it without the model in memory.
    model, path, _ = tiny
    root = tmp_path / "cache"
    environment = {**os.environ, "KERAS_TFM_CACHE_DIR": str(root)}
    command = [sys.executable, "-m", "keras_tfm.chat.entry_writer", path, "float32"]
    done = subprocess.run(command, env=environment, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    folder = chat_entries.entry_folder(path, "float32", root)
    assert user_cache.verify(folder, chat_entries.FILES)
    # No `.building` or `.failed` marker, no work folder: the entry alone.
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
    converted = LiteRTChat(*chat_entries.find_entry(path, "float32", root))
    ids = [int(i) for i in model.tokenizer(model.tokenizer.apply_chat_template("hi"))]
    for index, token in enumerate(ids):  # against the entry built in one process
        np.testing.assert_array_equal(
            converted.decoder.decode(token, index), lite.decoder.decode(token, index)
        )


def test_a_failed_conversion_keeps_its_traceback_and_removes_the_work(tiny, tmp_path):
    _, path, _ = tiny
    folder = chat_entries.entry_folder(path, "float32", tmp_path)
    work = folder.with_name(f".{folder.name}.work")
    work.mkdir(parents=True)  # no saved step in it: the converter fails
    with pytest.raises(OSError):
        writer.main(["--convert", str(folder), str(work)])
    failed = folder.with_name(f".{folder.name}.failed")
    assert "Traceback" in failed.read_text()
    assert not work.exists() and not folder.exists()
    assert writer.plan_chat_entry(tiny[0], path, "float32", {}, tmp_path) is None


def _greedy_answer(model, messages, max_new_tokens, stops):
    """`model.chat`'s greedy answer by full passes, no cache: each new id the
    argmax of the last position's logits, until the end id or a stop string."""
    tokenizer = model.tokenizer
    ids = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
    new = []
    for _ in range(max_new_tokens):
        token = int(np.argmax(np.asarray(model(np.array([ids + new])))[0, -1]))
        if token == tokenizer.end_token_id:
            break
        new.append(token)
        text = tokenizer.detokenize(new)
        if any(stop in text for stop in stops):
            break
    text = tokenizer.detokenize(new)
    cut = min([text.find(s) for s in stops if s in text] or [len(text)])
    return text[:cut].strip()


@pytest.mark.parametrize(
    "messages, stops",
    [
        ("Hello", ()),
        ("A longer question, or two.", ()),
        (
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"},
            ],
            (),
        ),
        ("Hello", ("or",)),  # the random model's answers hold "or" often
    ],
)
def test_greedy_answers_equal_the_uncached_reference(tiny, lite, messages, stops):
    want = _greedy_answer(tiny[0], messages, 20, stops)
    assert lite.chat(messages, max_new_tokens=20, stop_strings=stops) == want
    pieces = lite.chat(messages, 20, stop_strings=stops, stream=True)
    assert "".join(pieces).strip() == want


def _command(path, *options):
    return ["chat", "--model", path, "--max-new-tokens", "12", *options, "Hi there"]


def _answer(argv, root, continue_with=None):
    """What the launcher does first: `argv` parsed by the command's parser,
    answered from the cache if it can be."""
    later = None if continue_with is None else (lambda: continue_with(argv))
    return chat_cli.answer_from_cache(build_parser().parse_args(argv), root, later)


def _options(args):
    """The options the LiteRT entry reads for `keras-tfm chat args...`."""
    return chat_cli.cache_options(build_parser().parse_args(["chat", *args]))


def test_second_command_answers_without_tensorflow(tiny, capsys):
    _, path, root = tiny
    main(_command(path, "--stop", "or"))  # through TensorFlow (the cache is off)
    want = capsys.readouterr().out
    script = textwrap.dedent(f"""
        import sys
        from keras_tfm import launcher
        launcher.main({_command(path, "--stop", "or")!r})
        assert not {{"tensorflow", "keras", "keras_hub"}} & set(sys.modules)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_TFM_CACHE_DIR": str(root)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == want
    assert done.stderr == ""  # LiteRT's own log lines dropped


TURNS = ["Hello", "Why?", "One more."]


def _tensorflow_conversation(model, lines, max_new_tokens, **settings):
    """What the TensorFlow REPL (`keras_tfm.chat.converse`) prints for `lines`."""
    from keras_tfm.chat import ChatSession, converse

    out = io.StringIO()
    session = ChatSession(model, jit_compile=False)
    converse(model, iter(lines), out, max_new_tokens, session=session, **settings)
    return out.getvalue()


def test_a_conversation_on_the_entry_runs_only_each_turns_new_tokens(tiny):
    model, path, root = tiny
    chat = LiteRTChat(*chat_entries.find_entry(path, "float32", root))
    starts, prefill = [], chat.decoder.prefill

    def recording(token_ids, start):
        starts.append((start, len(token_ids)))
        return prefill(token_ids, start)

    chat.decoder.prefill = recording
    history = repl.converse_with(chat, iter(TURNS), io.StringIO(), max_new_tokens=8)
    # Each answer is the greedy answer to the history so far, by full passes.
    for i in (1, 3, 5):
        assert history[i]["content"] == _greedy_answer(model, history[:i], 8, ())
    # One prefill a turn; a later one starts past the previous turn's prompt
    # (its answer's keys were written while decoding) and runs fewer tokens
    # than its whole prompt.
    lengths = [len(chat.prompt_ids(history[:i])) for i in (1, 3, 5)]
    assert [start for start, _ in starts][0] == 0 and len(starts) == 3
    for turn in (1, 2):
        start, count = starts[turn]
        assert lengths[turn - 1] <= start and start + count == lengths[turn]
    assert chat.cached_ids[: lengths[2]] == chat.prompt_ids(history[:5])


def test_a_conversation_that_outgrows_the_entry_goes_on_through_tensorflow(
    tiny, capsys, monkeypatch
):
    model, path, root = tiny
    from keras_tfm.cli.chat import continue_conversation

    # Turns of ~40 tokens (one a byte) and 40 new ones pass the 128
    # positions (the buffer and the model's context) by the third: the
    # TensorFlow REPL drops the oldest turns there, and so does the session
    # the conversation moves to.
    lines = ["Hello", "A longer question, or two.", "And one more?", "Last."]
    want = _tensorflow_conversation(model, lines, 40)
    loads = []

    def tensorflow(argv):
        loads.append(argv)
        return continue_conversation(argv)

    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{x}\n" for x in lines)))
    argv = ["chat", "--model", path, "--max-new-tokens", "40", "--sampler", "greedy"]
    assert _answer(argv, root, continue_with=tensorflow)
    printed = capsys.readouterr()
    assert printed.out == want
    assert len(loads) == 1
    assert printed.err.count("outgrew the LiteRT copy's 128 positions") == 1
    # Answers as long as the buffer: TensorFlow from the start, nothing said.
    argv[argv.index("40")] = "128"
    assert not _answer(argv, root, continue_with=tensorflow)
    assert len(loads) == 1 and not capsys.readouterr().err


SAMPLED = ["--sampler", "top_p", "--temperature", "0.8", "--seed", "5"]


@pytest.mark.parametrize(
    "options",
    [
        SAMPLED,
        ["--sampler", "top_p", "--top-p", "0.95", "--min-p", "0.05", "--seed", "-8"],
    ],
)
def test_a_seed_samples_the_tensorflow_answer(tiny, options, capsys):
    _, path, root = tiny
    main(_command(path, *options))  # through TensorFlow (the cache is off)
    want = capsys.readouterr().out
    assert _answer(_command(path, *options), root)
    assert capsys.readouterr().out == want
    # Sampled, not greedy: another seed, another answer.
    other = [*options[:-1], "6"]
    assert _answer(_command(path, *other), root)
    assert capsys.readouterr().out != want


def test_a_sampled_conversation_from_the_entry_imports_no_tensorflow(tiny):
    model, path, root = tiny
    lines = TURNS[:2]
    script = textwrap.dedent(f"""
        import sys
        from keras_tfm import launcher
        launcher.main(["chat", "--model", {path!r}, "--max-new-tokens", "8",
                       *{SAMPLED!r}])
        assert not {{"tensorflow", "keras", "keras_hub"}} & set(sys.modules)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_TFM_CACHE_DIR": str(root)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _tensorflow_conversation(
        model, lines, 8, sampler="top_p", temperature=0.8, top_p=0.9, seed=5
    )


def test_entry_keys(tiny, monkeypatch):
    _, path, root = tiny
    base = chat_entries.entry_folder(path, "float32", root)
    assert chat_entries.entry_folder(os.path.relpath(path), "float32", root) == base
    others = [
        chat_entries.entry_folder(path, "int8", root),
        chat_entries.entry_folder("smollm2_135m_instruct", "float32", root),
    ]
    monkeypatch.setattr(chat_entries, "FORMAT_VERSION", 10**6)
    others.append(chat_entries.entry_folder(path, "float32", root))
    monkeypatch.undo()
    monkeypatch.setattr(chat_entries, "litert_version", lambda: "0.0.0")
    others.append(chat_entries.entry_folder(path, "float32", root))
    monkeypatch.undo()
    versions = {**user_cache.versions(), "tensorflow": "0.0.0"}
    monkeypatch.setattr(user_cache, "versions", lambda: versions)
    others.append(chat_entries.entry_folder(path, "float32", root))
    assert len({base, *others}) == 1 + len(others)


def test_a_changed_model_file_is_not_read(tiny):
    _, path, root = tiny
    status = os.stat(path)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    try:
        assert chat_entries.find_entry(path, "float32", root) is None
        assert not _answer(_command(path), root)
    finally:
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert chat_entries.find_entry(path, "float32", root) is not None


@pytest.fixture
def copied(tiny, tmp_path):
    """A copy of the module's cache folder, free to damage."""
    _, path, root = tiny
    shutil.copytree(root, tmp_path / "cache")
    return path, tmp_path / "cache"


@pytest.mark.parametrize("damage", ["truncate", "garble", "entry"])
def test_a_corrupt_entry_is_deleted_not_read(copied, damage, capsys):
    path, root = copied
    folder = chat_entries.entry_folder(path, "float32", root)
    name = chat_entries.ENTRY if damage == "entry" else chat_entries.DECODER
    data = bytearray((folder / name).read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2 : len(data) // 2 + 8] = b"\x7f" * 8
    (folder / name).write_bytes(bytes(data))
    assert not _answer(_command(path), root)
    assert not folder.exists() and capsys.readouterr().out == ""


def test_the_command_starts_one_background_build_which_rebuilds(
    tiny, tmp_path, monkeypatch, capsys
):
    model, path, _ = tiny
    root = tmp_path / "cache"
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(root))
    started = []

    class Started:  # a process that is still running: this test's parent
        pid = os.getppid()

        def __init__(self, command, **kwargs):
            started.append((command, kwargs["env"]["KERAS_TFM_CACHE_DIR"]))

    monkeypatch.setattr(writer.subprocess, "Popen", Started)
    monkeypatch.setattr("keras_tfm.cli.loading.resolve_model", lambda *args: model)
    monkeypatch.setattr(writer, "load_named_model", lambda *args: model)
    capsys.readouterr()
    main(_command(path))
    said = capsys.readouterr().err
    assert said.count("LiteRT copy in a background process") == 1, said
    main(_command(path))  # the first build is still "running"
    assert "background" not in capsys.readouterr().err
    assert started == [
        (
            [sys.executable, "-m", "keras_tfm.chat.entry_writer", path, "float32"],
            str(root),
        )
    ]
    writer.main([path, "float32"])  # what that process runs
    folder = chat_entries.entry_folder(path, "float32", root)
    assert user_cache.verify(folder, chat_entries.FILES)
    assert not list(root.glob("litert/.*.building"))
    capsys.readouterr()
    assert _answer(_command(path), root)
    # A build that failed is not tried again until the cache is cleared.
    shutil.rmtree(folder)
    monkeypatch.setattr(
        "keras_tfm.export.litert_decoder.save_decoder_step", lambda *args: 1 / 0
    )
    with pytest.raises(ZeroDivisionError):
        writer.main([path, "float32"])
    assert writer.plan_chat_entry(model, path, "float32", {}, root) is None
    # Nor is one that was killed before it could say so.
    failed = folder.with_name(f".{folder.name}.failed")
    assert "ZeroDivisionError" in failed.read_text()
    failed.write_text(writer.KILLED)
    assert writer.plan_chat_entry(model, path, "float32", {}, root) is None
    main(["cache", "clear"])
    assert not root.exists()
    assert writer.plan_chat_entry(model, path, "float32", {}, root) is not None


def test_cache_clear_removes_the_entries(copied, monkeypatch, capsys):
    path, root = copied
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(root))
    main(["cache", "info"])
    assert "litert: 1 entries" in capsys.readouterr().out
    main(["cache", "clear"])
    assert not root.exists()
    assert not _answer(_command(path), root)


@pytest.mark.parametrize(
    "options",
    [
        ["--temperature", "0.5"],  # not read by greedy: TensorFlow refuses it
        ["--sampler", "top_p", "--min-p", "2"],  # out of range: refused too
        ["--repetition-penalty", "1.2"],
        ["--weights", "int8"],
        ["--max-new-tokens", "1000"],  # past the 128 positions of the buffer
    ],
)
def test_what_the_cache_does_not_answer(tiny, options, capsys):
    _, path, root = tiny
    assert not _answer(_command(path, *options), root)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("options", [["--max-new-tokens", "0"], ["--help"]])
def test_the_launcher_parses_before_the_cache_answers(tiny, options, capsys):
    from keras_tfm import launcher

    _, path, root = tiny
    with pytest.raises(SystemExit) as exit_:
        launcher.main(_command(path, *options))
    printed = capsys.readouterr()
    if options == ["--help"]:
        assert exit_.value.code == 0 and "--max-new-tokens" in printed.out
    else:
        assert exit_.value.code == 2 and "--max-new-tokens" in printed.err


def test_other_commands_are_not_answered(tiny, capsys):
    _, path, root = tiny
    assert not _answer(["chat", "--model", path], root)
    assert not _answer(["generate", path, "--prompt", "Hi"], root)
    assert not _answer(_command("no_such_model"), root)
    assert capsys.readouterr() == ("", "")


def test_entries_only_where_litert_agrees(tiny, tmp_path):
    model, path, _ = tiny
    root = tmp_path / "cache"
    # int8 steps are written from a preset's template only: a model file
    # chats in float32 by default, and an int8 entry is not planned for it.
    assert chat_entries.default_weights(path) == "float32"
    assert _options(["--model", path, "Hi"]).weights == "float32"
    assert _options(["Hi"]).weights == "int8"  # SmolLM2's default
    assert _options(["--weights", "float32", "Hi"]).weights == "float32"
    assert writer.plan_chat_entry(model, path, "int8", {}, root) is None
    assert writer.plan_chat_entry(model, path, "bfloat16", {}, root) is None
    sampled = {"sampler": "top_p", "temperature": 0.7, "top_p": 0.9}
    assert writer.plan_chat_entry(model, path, "float32", sampled, root) is not None
    penalized = {"repetition_penalty": 1.3}
    assert writer.plan_chat_entry(model, path, "float32", penalized, root) is None
    assert (
        writer.plan_chat_entry(model, path, "float32", {"num_beams": 2}, root) is None
    )
    # A model whose own default samples: the entry holds that default, which
    # a command without decoding flags samples with.
    sampling = _tiny_chat_model()
    sampling.generation_config = GenerationConfig(sampler="top_p", top_p=0.9)
    folder = writer.build_chat_entry(sampling, path, "float32", root)
    entry = json.loads((folder / chat_entries.ENTRY).read_text())
    assert entry["generation_config"] == {"sampler": "top_p", "top_p": 0.9}
    options = _options(["Hi"])
    assert chat_command.decoding_config(options, entry) == GenerationConfig(
        sampler="top_p", top_p=0.9
    )
    options = _options(["--sampler", "greedy", "Hi"])
    assert chat_command.decoding_config(options, entry) == GenerationConfig()


@pytest.mark.parametrize(
    "module",
    [
        chat_command,
        chat_entries,
        litert_bench,
        litert_chat,
        repl,
        stop_text,
        writer,
        decoding_flags,
    ],  # fmt: skip
)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_a_template_writes_the_entry_and_the_first_command_answers_from_it(
    tiny, tmp_path, monkeypatch, capsys
):
    # A preset that keeps a template of its step (here the tiny model's, made
    # here): the command writes the entry itself, in this process, and
    # answers from it, as the next command does; it starts no process.
    from keras_tfm.export.litert_template import make_decoder_template

    model, path, built = tiny
    template = tmp_path / "template"
    make_decoder_template(model, template, chat_entries.buffer_length(model))
    monkeypatch.setattr(writer, "template_folder", lambda reference: template)
    monkeypatch.setattr(writer.subprocess, "Popen", None)  # no process started
    monkeypatch.setattr("keras_tfm.cli.chat.keeps_template", lambda reference: True)

    def resolve(*args):  # a loader that converts: its weights are not kept
        converted_cache.write_entry(path, {"probe": 1}, {}, {"w": np.ones(2)})
        return model

    monkeypatch.setattr("keras_tfm.cli.loading.resolve_model", resolve)

    def through_tensorflow(*args, **kwargs):
        pytest.fail("the command answered through TensorFlow")

    monkeypatch.setattr(model, "chat", through_tensorflow)
    root = tmp_path / "cache"
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(root))
    main(_command(path))
    first = capsys.readouterr()
    assert first.err == ""
    assert _answer(_command(path), root)
    assert capsys.readouterr().out == first.out
    assert converted_cache.read_entry(path, {"probe": 1}, root) is None
    # The filled step computes what the converted one (the fixture's) does.
    folder, _ = chat_entries.find_entry(path, "float32", root)
    ids = [int(i) for i in model.tokenizer(model.tokenizer.apply_chat_template("hi"))]
    ours = LiteRTChat(*chat_entries.find_entry(path, "float32", root)).decoder
    theirs = LiteRTChat(*chat_entries.find_entry(path, "float32", built)).decoder
    for i, token in enumerate(ids):
        np.testing.assert_array_equal(ours.decode(token, i), theirs.decode(token, i))
    # A template of another step (another buffer length) is not used.
    shutil.rmtree(folder)
    description = json.loads((template / "template.json").read_text())
    description["buffer_length"] = 64
    (template / "template.json").write_text(json.dumps(description))
    assert writer.plan_chat_entry(model, path, "float32", {}, root) == folder
    assert writer.write_chat_entry(model, path, "float32", {}, root) is None
