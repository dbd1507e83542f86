"""`keras-tfm presets`: each preset of the zoo with its weights, task,
parameters and the command that fits it."""

import json
import re

from keras_tfm.cli.loading import SEQ2SEQ_CLASSES

HELP = (
    "list the zoo's presets: weights (pretrained, trained here or none), "
    "task, parameters and the command that fits each"
)

# What each kind of preset is for: (class name, has weights) -> command.
COMMANDS = {
    ("CausalLM", False): "keras-tfm train --preset {name}",
    ("CausalLM", True): 'keras-tfm generate {name} --prompt "..."',
    ("EncoderClassifier", True): 'keras-tfm classify {name} --text "..."',
    **{
        (name, True): 'keras-tfm generate {name} --prompt "..." --sampler greedy'
        for name in SEQ2SEQ_CLASSES
    },
}
CHAT_COMMAND = 'keras-tfm chat "..." --model {name}'
# The class a converted checkpoint's loader builds (zoo/<name>/source.json).
LOADER_CLASSES = {"gguf_llama": "CausalLM", "sentence_encoder": "SentenceEncoder"}


def add_arguments(p):
    del p  # no options


def preset_row(name):
    """(name, weights, task, parameters, command) of a preset, read from its
    folder and card without building it."""
    from keras_tfm import zoo

    folder, weights = zoo.preset_dir(name), zoo.preset_weights(name)
    if (folder / "source.json").is_file():
        loader = json.loads((folder / "source.json").read_text())["loader"]
        task = LOADER_CLASSES.get(loader, loader)
    else:
        task = json.loads((folder / "config.json").read_text())["class_name"]
        task = task.removeprefix("keras_tfm>")
    found = re.search(r"^\| *Parameters *\| *([\d,]+)", zoo.preset_card(name), re.M)
    command = COMMANDS.get((task, weights != "none"), "Python: zoo.from_preset")
    if weights == "pretrained" and task == "CausalLM":
        command = CHAT_COMMAND  # the converted instruct checkpoint
    parameters = found[1] if found else "?"
    return name, weights, task, parameters, command.format(name=name)


def run(args):
    from keras_tfm import zoo

    rows = [preset_row(name) for name in zoo.list_presets()]
    header = ("preset", "weights", "task", "parameters", "command")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[4]]))
