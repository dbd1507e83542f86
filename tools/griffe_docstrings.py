"""A griffe extension for the API site (mkdocs.yml): keras-tfm's docstrings
as griffe's Google-style parser reads them.

The docstrings follow Keras: an `Example:` title over unindented doctest
lines (`>>> ...`, as `doctest` and the tests run them) and a
`Call arguments:` section. Griffe wants an indented `Examples:` section (it
renders unindented `>>>` lines as nested block quotes) and shows unknown
sections as a box whose lines run together, so before parsing, this:

- renames `Example:` to `Examples:` and indents its lines, so that they
  render as highlighted Python sessions;
- turns the `name: description` entries of `Call arguments:` into a list;
- splits the `Args:` entries that describe several arguments at once
  (`name, dtype: as for keras.metrics.Metric`) into one entry each, and
  shows an `Args:` section that is a sentence (`Those of ...`) as text.

The code has no type annotations (as Keras), so the Type column of the
argument tables is filled here, for the page only: from a literal default
(`epochs=8`: int) or from keras-hub's argument names, which always mean the
same type (`hidden_dim`: int, `dropout`: float; `| None` with a None
default). An argument of neither kind keeps an empty cell.

And a name in backticks that the API reference documents (`CausalLM`,
`models.CausalLM`, `CausalLM.generate`, `train_language_model()`) becomes a
link to its entry (an optional autorefs cross-reference: a name the site
does not render stays plain code).
"""

import ast
import re
from pathlib import Path

import griffe

_TITLE = re.compile(r"^(\w[\w ]*):\s*$")
# Section titles; any other "Some text:" line is prose (e.g. inside examples).
_SECTIONS = {
    "args", "arguments", "call arguments", "returns", "raises", "yields",
    "example", "examples", "references", "reference", "note", "notes",
    "attributes", "warning", "warnings", "see also",
}  # fmt: skip
_CALL_ARGUMENT = re.compile(r"^    (\*{0,2}\w[\w, ]*):(\s|$)")
_ARGUMENT = re.compile(r"^    \*{0,2}\w+( \(.*\))?:(\s|$)")
_SHARED_ARGUMENT = re.compile(r"^    (\w+(?:, \w+)+):(.*)$")


def rewrite(text):
    """`text` (a dedented docstring) with its examples and call arguments
    in the form griffe renders well.

    Example:
    >>> rewrite("Sums.\\n\\nExample:\\n>>> 1 + 1\\n2")
    'Sums.\\n\\nExamples:\\n    >>> 1 + 1\\n    2'
    >>> print(rewrite("Args:\\n    name, dtype: as for Metric."))
    Args:
        name: as for Metric.
        dtype: as for Metric.
    """
    out = []
    section = None
    indent_example = False
    for line in text.split("\n"):
        title = _TITLE.match(line)
        if title and title.group(1).lower() in _SECTIONS:
            section = title.group(1).lower()
            if section == "example":
                line, section = "Examples:", "examples"
            indent_example = None  # decided by the section's first line
            out.append(line)
            continue
        if section == "examples" and line.strip():
            if indent_example is None:
                indent_example = not line.startswith(" ")
            if indent_example:
                line = "    " + line
        elif section == "call arguments":
            line = _CALL_ARGUMENT.sub(r"    - `\1`:\2", line)
        elif section == "args" and line.startswith("    ") and line[4] != " ":
            shared = _SHARED_ARGUMENT.match(line)
            if shared:
                names, description = shared.groups()
                out.extend(f"    {n}:{description}" for n in names.split(", "))
                continue
            if not _ARGUMENT.match(line) and out[-1] == "Args:":
                out[-1] = "Args: " + line.strip()
                section = None
                continue
        out.append(line)
    return "\n".join(out)


# Argument names with one meaning across the package (keras-hub's names).
_NAMED_TYPES = {
    **dict.fromkeys(
        "batch_size vocabulary_size max_sequence_length max_new_tokens "
        "hidden_dim num_heads num_key_value_heads head_dim sequence_length "
        "num_classes num_layers num_encoder_layers num_decoder_layers "
        "intermediate_dim max_length epochs steps_per_epoch warmup_steps "
        "padding_id start_token_id end_token_id rank top_k num_beams seed "
        "tokens_per_batch cache_update_index window_shift epoch step "
        "num_parameters tokens_per_step".split(),
        "int",
    ),
    **dict.fromkeys(
        "dropout layer_norm_epsilon learning_rate weight_decay temperature top_p "
        "length_penalty label_smoothing lora_alpha peak_flops minutes "
        "achieved_flops flops_per_token".split(),
        "float",
    ),
    **dict.fromkeys(
        "training jit_compile overwrite stream return_attention_scores "
        "normalize_first use_bias mask_zero".split(),
        "bool",
    ),
    **dict.fromkeys("name text mode kind".split(), "str"),
    **dict.fromkeys("path directory root backup_dir output".split(), "str | Path"),
    "texts": "list[str]",
    "tokenizer": "keras_hub.tokenizers.Tokenizer",
    "backbone": "keras.Model",
    "preprocessor": "keras_tfm.models.Preprocessor",
    "config": "dict",
    "logs": "dict",
    "model": "keras.Model",
    "dataset": "tf.data.Dataset",
}
_LITERAL_TYPES = (bool, int, float, str, tuple, list, dict)


def annotation(name, default):
    """The type shown for an unannotated argument `name` whose default is the
    expression `default` (None without one), or None if it is not known.

    Example:
    >>> annotation("epochs", "8"), annotation("save_freq", "'epoch'")
    ('int', 'str')
    >>> annotation("dropout", "None"), annotation("inputs", None)
    ('float | None', None)
    """
    try:
        value = ast.literal_eval(default) if default is not None else ...
    except (ValueError, SyntaxError):  # an expression, e.g. a constant's name
        value = ...
    if isinstance(value, _LITERAL_TYPES):
        return type(value).__name__
    named = _NAMED_TYPES.get(name)
    if named is not None and value is None:
        return f"{named} | None"
    return named


# The subpackages of keras_tfm that docs/api/ renders, one page each.
API_PACKAGES = tuple(
    sorted(
        page.stem
        for page in (Path(__file__).parents[1] / "docs" / "api").glob("*.md")
        if page.read_text(encoding="utf-8").startswith("# keras_tfm.")
    )
)
_CODE = re.compile(r"`(?P<name>[A-Za-z_][\w.]*)(?P<call>\(\))?`")


def linked(text, targets):
    """`text` with each backticked name found in `targets` (name -> the
    identifier of its API entry) made an optional cross-reference; doctest
    sections are left alone.

    Example:
    >>> linked("See `LM()`, not `x`.", {"LM": "keras_tfm.models.LM"})
    'See <autoref identifier="keras_tfm.models.LM" optional>`LM()`</autoref>, not `x`.'
    """

    def link(match):
        identifier = targets.get(match["name"].removeprefix("keras_tfm."))
        if identifier is None:
            return match[0]
        return f'<autoref identifier="{identifier}" optional>{match[0]}</autoref>'

    out, examples = [], False
    for line in text.split("\n"):
        if _TITLE.match(line):
            examples = line.lower().startswith("example")
        elif line and not line[0].isspace():
            examples = False
        out.append(line if examples else _CODE.sub(link, line))
    return "\n".join(out)


def link_targets(package):
    """Name -> identifier of every public object of the API pages: bare
    (`CausalLM`, if no other page has that name), with its subpackage
    (`models.CausalLM`), and a class's public methods (`CausalLM.generate`)."""
    targets, seen = {}, {}
    for sub in API_PACKAGES:
        module = package.get_member(sub)
        for name in module.exports or ():
            identifier = f"keras_tfm.{sub}.{name}"
            targets[f"{sub}.{name}"] = identifier
            seen.setdefault(name, set()).add(identifier)
            try:
                member = module.get_member(name)
                members = (member.final_target if member.is_alias else member).members
            except (griffe.AliasResolutionError, griffe.CyclicAliasError, KeyError):
                continue
            for member in members:
                if not member.startswith("_"):
                    targets[f"{name}.{member}"] = f"{identifier}.{member}"
    targets.update({n: next(iter(ids)) for n, ids in seen.items() if len(ids) == 1})
    return targets


def _objects(obj):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class KerasDocstrings(griffe.Extension):
    """Rewrites each object's docstring with `rewrite` when it is loaded,
    gives unannotated arguments the type `annotation` finds, and links the
    names `linked` finds once the package is loaded."""

    def on_package(self, *, pkg, **kwargs):
        if pkg.name != "keras_tfm":
            return
        targets = link_targets(pkg)
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = linked(obj.docstring.value, targets)

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
        for parameter in getattr(obj, "parameters", None) or ():
            if parameter.annotation is None and parameter.name not in ("self", "cls"):
                default = None if parameter.default is None else str(parameter.default)
                parameter.annotation = annotation(parameter.name, default)
