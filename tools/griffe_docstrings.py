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
"""

import re

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


class KerasDocstrings(griffe.Extension):
    """Rewrites each object's docstring with `rewrite` when it is loaded."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
