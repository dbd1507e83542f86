"""What the decoding flags of `keras-tfm generate` and `chat` set.

A flag given goes to the model as the setting of the same name (`FLAGS`);
a flag's default is sent only with the sampler it is for (`DEFAULT_FOR`).
Here, without Keras, because the LiteRT chat (`keras_tfm.lite.chat_command`)
resolves the same flags before deciding whether it answers.

Example:
>>> import argparse
>>> args = argparse.Namespace(temperature=None, top_p=None, seed=3,
...     sampler_defaults={"temperature": 1.0, "top_p": DEFAULT_TOP_P})
>>> sampler_settings("top_p", args)
{'sampler': 'top_p', 'seed': 3, 'temperature': 1.0, 'top_p': 0.9}
>>> sampler_settings(None, args)  # the model's default sampler
{'seed': 3}
"""

FLAGS = {
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "num_beams": "--num-beams",
    "seed": "--seed",
    "repetition_penalty": "--repetition-penalty",
    "min_p": "--min-p",
    "stop_strings": "--stop",
}
"""The setting each decoding flag sets."""


SAMPLING = ("random", "top_k", "top_p")

DEFAULT_FOR = {
    "temperature": SAMPLING,
    "top_k": ("top_k",),
    "top_p": ("top_p",),
    "num_beams": ("beam",),
}
"""The samplers a flag's default is sent with (top_p sampling reads a top_k
too, but the CLI's --top-k default is for top_k sampling only)."""


DEFAULT_TOP_P = 0.9
"""The CLI's `--top-p` with `--sampler top_p`."""


def sampler_settings(sampler, args):
    """The settings of the flags given, and the defaults of the flags for
    `sampler` (None: the model's default sampler, no default sent)."""
    settings = {} if sampler is None else {"sampler": sampler}
    given = {
        name: getattr(args, "stop" if name == "stop_strings" else name, None)
        for name in FLAGS
    }
    settings.update({name: value for name, value in given.items() if value is not None})
    for name, value in getattr(args, "sampler_defaults", {}).items():
        if sampler in DEFAULT_FOR[name] and name not in settings:
            settings[name] = value
    return settings
