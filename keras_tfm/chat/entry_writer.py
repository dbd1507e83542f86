"""Writing the LiteRT chat entry that lets the next `keras-tfm chat` skip TensorFlow.

Once `keras-tfm chat` has loaded its model through TensorFlow, it checks that
LiteRT would give the same answers (`plan_chat_entry`: float32 weights, a
byte-level BPE tokenizer whose `tokenizers` pipeline gives the same ids, a
chat template, greedy or sampling decoding without logit processors,
stop strings allowed) and writes the entry (the layout, keys and safety:
`keras_tfm.lite.chat_entries`): the decoding step
as LiteRT, its weights packed for XNNPACK, the tokenizer pipeline, the chat
settings. The next `keras-tfm chat` with that model finds the entry before
importing TensorFlow and answers from it (`keras_tfm.lite.litert_chat`).

- A preset that keeps a template of its step (`template_folder`; SmolLM2
  does: `tools/make_litert_templates.py`) has its entry written by the
  command itself (`write_chat_entry`), the template filled with the
  model's weights (`keras_tfm.lite.decoder_template`): about 5 seconds and
  0.7 GB for SmolLM2. The command then answers from the entry, as the next
  one will.
- Any other model's step goes through TensorFlow's converter, in a
  background process (`start_chat_entry`, `python -m
  keras_tfm.chat.entry_writer MODEL WEIGHTS`) that loads the model again
  and writes the entry (`build_chat_entry`), started once the command has
  answered through TensorFlow; the command says so in one line and returns
  (SmolLM2 without its template: about a minute and 5 GB).

While a process builds an entry, a marker `.<key>.building` beside it holds
its process id, so that a second command does not start another; a build
that fails or is killed leaves `.<key>.failed` (its traceback, or a note
that it did not finish), and the command does not try again until
`keras-tfm cache clear`. The build needs about 5 GB of memory at its peak
for SmolLM2 (540 MB of float32 weights), once: the process saves the
decoding step, then replaces itself with one that converts it without the
model in memory.

Example:
>>> import tempfile
>>> from keras_tfm import zoo
>>> [path.name for path in model_files("gpt_tiny")]  # what an entry watches
['README.md', 'config.json']
>>> model = zoo.from_preset("gpt_tiny")   # no tokenizer: no entry
>>> plan_chat_entry(model, "gpt_tiny", "float32", {}, tempfile.mkdtemp())
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

from keras_tfm._optional import tensorflow_installed
from keras_tfm.generation.generation_config import single_config
from keras_tfm.lite import chat_entries, decoder_template, quantized_step, sampling
from keras_tfm.lite.litert_decoder import LiteRTDecoder, default_prefill_length
from keras_tfm.lite.user_cache import seal
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers import ByteLevelBPETokenizer
from keras_tfm.zoo.catalogue import preset_dir, read_source
from keras_tfm.zoo.installed_checkpoints import checkpoint_path
from keras_tfm.zoo.named_model import load_named_model

PROBE = [
    {"role": "user", "content": "Ünïcode, digits 12345 and  spaces\n\tend."},
    {"role": "assistant", "content": "Réponse: 3.14 - ok!"},
    {"role": "user", "content": "What is the capital of France?"},
]
"""A conversation both tokenizations must agree on before an entry is written."""


def model_files(reference):
    """The files a command's model is read from: a `.keras` file, or a
    preset's folder (and the installed checkpoint its `source.json` names)."""
    if Path(reference).is_file():
        return [Path(reference)]
    folder = preset_dir(reference)
    files = sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )
    source = read_source(folder)
    return files + ([checkpoint_path(source)] if source else [])


def _decodes_on_litert(model, settings):
    """Whether the LiteRT chat decodes `model.chat(**settings)`: greedy or a
    built-in sampling (`keras_tfm.lite.sampling`), no logit processor."""
    sampler = settings.get("sampler")
    rest = {k: v for k, v in settings.items() if k != "sampler"}
    config = single_config(model.generation_config, sampler, rest)
    return isinstance(sampler, str | None) and sampling.draws(config)


def _config_values(config):
    """A `GenerationConfig`'s fields that are set, for `entry.json`."""
    if config is None:
        return None
    values = dataclasses.asdict(config)
    return {name: value for name, value in values.items() if value not in (None, ())}


def _pipeline(tokenizer):
    """The tokenizer's `tokenizers` pipeline if it gives the tokenizer's ids."""
    if not isinstance(tokenizer, ByteLevelBPETokenizer) or not tokenizer.chat_template:
        return None
    tokenizer._maybe_initialized_tokenizers()  # keras-hub builds it lazily
    pipeline = tokenizer._tokenizer
    try:
        text = tokenizer.apply_chat_template(PROBE)
    except ValueError:  # a template that refuses the probe: no entry
        return None
    ids = [int(i) for i in tokenizer(text)]
    if pipeline.encode(text, add_special_tokens=False).ids != ids:
        return None
    if pipeline.decode(ids, skip_special_tokens=False) != tokenizer.detokenize(ids):
        return None
    return pipeline


STEP = "step"
"""The decoding step's SavedModel in the work folder."""


def _work_folder(folder):
    return folder.with_name(f".{folder.name}.work")


def _markers(folder):
    return (
        folder.with_name(f".{folder.name}.building"),
        folder.with_name(f".{folder.name}.failed"),
    )


def _building(marker):
    """Whether the process whose id `marker` holds is still running."""
    try:
        os.kill(int(marker.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def plan_chat_entry(model, reference, weights, settings, root=None, builder=False):
    """The entry folder to write for `model` as `reference` names it, or None.

    None when caching is off, the entry is there or being built, an earlier
    build failed, or LiteRT would not give `model.chat(**settings)`'s
    answers: `weights` not one of `chat_entries.WEIGHTS` (or "int8" for a
    model without a step template), no byte-level BPE tokenizer with a
    chat template, or decoding the LiteRT chat does not do (beam search,
    logit processors).
    `builder`: asked by the process that builds it (its markers are its own).
    """
    folder = chat_entries.entry_folder(reference, weights, root)
    if folder is None or weights not in chat_entries.WEIGHTS:
        return None
    if weights != "float32" and not chat_entries.keeps_template(reference):
        return None  # a quantized step is written from a template only
    building, failed = _markers(folder)
    if (
        chat_entries.litert_version() == "absent"
        or (not builder and (failed.exists() or _building(building)))
        or chat_entries.find_entry(reference, weights, root) is not None
        or not _decodes_on_litert(model, settings)
        or _pipeline(getattr(model, "tokenizer", None)) is None
    ):
        return None
    return folder


def build_chat_entry(model, reference, weights, root=None):
    """Writes the entry of `model` (what the background process runs).

    Returns:
        The entry folder, or None if `plan_chat_entry` finds none to write.
    """
    prepared = prepare_chat_entry(model, reference, weights, root)
    return None if prepared is None else finish_chat_entry(*prepared)


def prepare_chat_entry(model, reference, weights, root=None):
    """The first half of `build_chat_entry`: everything but the conversion.

    Writes the decoding step as a SavedModel, the tokenizer pipeline and the
    chat settings into a work folder beside the entry (`.<key>.work`).

    Returns:
        `(entry folder, work folder)` for `finish_chat_entry`, or None if
        `plan_chat_entry` finds no entry to write.
    """
    folder = plan_chat_entry(model, reference, weights, {}, root, builder=True)
    folder = folder or plan_chat_entry(
        model, reference, weights, {"sampler": "greedy"}, root, builder=True
    )
    if folder is None:
        return None
    work = _work_folder(folder)
    shutil.rmtree(work, ignore_errors=True)  # what a killed build left
    work.mkdir(parents=True)
    try:
        from keras_tfm.export import litert_decoder  # TensorFlow: only to convert

        litert_decoder.save_decoder_step(
            model, work / STEP, chat_entries.buffer_length(model)
        )
        _write_chat_files(model, reference, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return folder, work


def _write_chat_files(model, reference, folder):
    """Writes an entry's tokenizer pipeline and chat settings into `folder`."""
    tokenizer = model.tokenizer
    entry = {
        "buffer_length": chat_entries.buffer_length(model),
        "end_token_id": int(tokenizer.end_token_id),
        "chat_template": tokenizer.chat_template,
        "template_tokens": tokenizer.template_tokens(),
        "generation_config": _config_values(model.generation_config),
        "sources": [chat_entries.file_identity(p) for p in model_files(reference)],
    }
    pipeline = _pipeline(tokenizer)
    (folder / chat_entries.TOKENIZER).write_text(pipeline.to_str(), encoding="utf-8")
    (folder / chat_entries.ENTRY).write_text(json.dumps(entry), encoding="utf-8")


def finish_chat_entry(folder, work):
    """The second half: converts the step to LiteRT and moves the entry into
    place (atomically, sealed); the work folder is removed either way.

    Returns:
        The entry folder.
    """
    try:
        with atomic_directory(folder, overwrite=True) as tmp:
            from keras_tfm.export import litert_decoder

            decoder = litert_decoder.convert_decoder_step(work / STEP)
            (tmp / chat_entries.DECODER).write_bytes(decoder)
            del decoder
            # XNNPACK packs the weights into decoder.tflite.xnnpack as it
            # first loads the file: once, here, not in the next chat.
            LiteRTDecoder(tmp / chat_entries.DECODER)
            for name in (chat_entries.TOKENIZER, chat_entries.ENTRY):
                shutil.copyfile(work / name, tmp / name)
            seal(tmp, chat_entries.FILES)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def template_folder(reference):
    """Where the preset `reference` keeps its decoding-step template (None
    for a model file)."""
    if Path(reference).is_file():
        return None
    return preset_dir(reference) / chat_entries.TEMPLATE


def step_template(model, reference, buffer_length=None):
    """The template folder that writes `model`'s step with `buffer_length`
    positions (default: its chat entry's), or None: `reference` keeps no
    template, or one made for other lengths or weights."""
    folder = template_folder(reference)
    description = folder and decoder_template.read_description(folder)
    if not description:
        return None
    buffer_length = buffer_length or chat_entries.buffer_length(model)
    step = (buffer_length, default_prefill_length(buffer_length))
    if (description["buffer_length"], description["prefill_length"]) != step:
        return None
    weights = {variable.path: variable for variable in model.weights}
    return folder if decoder_template.fits(description, weights) else None


NOTICE_BYTES = 50_000_000
"""A step file at least this large takes seconds to write: it is announced."""


def write_chat_entry(model, reference, weights, settings, root=None, announce=None):
    """Writes the entry of `model` in this process from its preset's
    template, if an entry is due and the preset keeps a template.

    The step's file filled with the model's weights (`weights="int8"`:
    rotated and quantized, `keras_tfm.lite.quantized_step`) and packed for
    XNNPACK: for SmolLM2 about 5 seconds and 0.7 GB in float32, 8 seconds
    and 1.2 GB in int8.

    `announce`: called with a one-line description before a step of at
    least `NOTICE_BYTES` is written.

    Returns:
        The entry folder, or None (no entry due, no template, or the
        template failed: `.<key>.failed` keeps why, and no later command
        tries again until `keras-tfm cache clear`).
    """
    folder = plan_chat_entry(model, reference, weights, settings, root)
    template = None if folder is None else step_template(model, reference)
    if template is None:
        return None
    size = decoder_template.read_description(template)["size"]
    if announce is not None and size >= NOTICE_BYTES:
        announce(
            f"writing {reference}'s {weights} LiteRT step ({size / 1e6:.0f} MB "
            "of float32 weights; once, a few seconds): later chats answer "
            "from it without TensorFlow"
        )
    try:
        with atomic_directory(folder, overwrite=True) as tmp:
            variables = {variable.path: variable for variable in model.weights}
            decoder = tmp / chat_entries.DECODER
            if weights == "float32":
                decoder_template.fill_template(template, variables, decoder)
            else:
                quantized_step.write_quantized_step(
                    template, variables, decoder, weights
                )
            LiteRTDecoder(decoder)  # packs decoder.tflite.xnnpack
            _write_chat_files(model, reference, tmp)
            seal(tmp, chat_entries.FILES)
    except Exception:  # the command answers through TensorFlow instead
        failed = _markers(folder)[1]
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(traceback.format_exc(), encoding="utf-8")
        return None
    return folder


def start_chat_entry(model, reference, weights, settings, root=None):
    """Starts the background process that writes the entry, if one is due
    and TensorFlow, whose converter it runs, is installed.

    Returns:
        The `subprocess.Popen` of that process, or None.
    """
    if not tensorflow_installed() or weights != "float32":
        return None  # the converter writes float32 steps; int8 needs a template
    folder = plan_chat_entry(model, reference, weights, settings, root)
    return None if folder is None else _start_writer(folder, reference, weights, root)


def _start_writer(folder, reference, weights, root):
    building, _ = _markers(folder)
    command = [sys.executable, "-m", "keras_tfm.chat.entry_writer", reference, weights]
    environment = dict(os.environ)
    if root is not None:
        environment["KERAS_TFM_CACHE_DIR"] = str(root)
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not stopped by the terminal's Ctrl-C
        env=environment,
    )
    building.parent.mkdir(parents=True, exist_ok=True)
    building.write_text(str(process.pid))
    return process


KILLED = (
    "The build did not finish (killed, or out of memory?). `keras-tfm cache "
    "clear` lets the next `keras-tfm chat` try again.\n"
)


def main(argv=None, replace_before_converting=False):
    """`python -m keras_tfm.chat.entry_writer MODEL WEIGHTS`: builds the entry.

    `replace_before_converting` (the background process): once the step is
    saved, the process replaces itself (`os.execv`, the same process id, so
    the `.building` marker stays true) with `python -m
    keras_tfm.chat.entry_writer --convert ENTRY WORK`, which converts it
    without the model in memory: SmolLM2's build peaked at 5.0-5.3 GB
    instead of 5.9-6.2 GB in one process (`/usr/bin/time`, idle).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--convert"]:
        folder, work = (Path(a) for a in argv[1:])
        _with_markers(folder, lambda: finish_chat_entry(folder, work))
        return
    reference, weights = argv

    def build():
        model = load_named_model(reference)
        prepared = prepare_chat_entry(model, reference, weights)
        if prepared is None:
            return
        if replace_before_converting:
            command = [sys.executable, "-m", "keras_tfm.chat.entry_writer", "--convert"]
            os.execv(sys.executable, command + [str(p) for p in prepared])
        finish_chat_entry(*prepared)

    folder = chat_entries.entry_folder(reference, weights)
    building, failed = _markers(folder)
    building.parent.mkdir(parents=True, exist_ok=True)
    building.write_text(str(os.getpid()))
    # Written first, removed on success: a build the kernel kills (out of
    # memory: the build peaks at ~5 GB for SmolLM2) is not retried by
    # every later command.
    failed.write_text(KILLED, encoding="utf-8")
    _with_markers(folder, build)


def _with_markers(folder, build):
    """Runs `build`; then removes the `.building` marker, and the `.failed`
    one on success (on failure it holds the traceback). An `os.execv` in
    `build` leaves both to the process it becomes."""
    building, failed = _markers(folder)
    try:
        build()
    except BaseException:
        failed.write_text(traceback.format_exc(), encoding="utf-8")
        raise
    else:
        failed.unlink(missing_ok=True)
    finally:
        building.unlink(missing_ok=True)


if __name__ == "__main__":
    os.nice(max(0, 10 - os.nice(0)))  # the user's next command comes first
    main(replace_before_converting=True)
