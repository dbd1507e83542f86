"""The Python blocks of a Markdown page, and the answers their comments promise."""

import ast
import re

# A line that promises its answer: `llm.chat(...)  # "The capital..."`.
PROMISE = re.compile(r"^(?P<call>\w+\.\w+\(.*\))  # (?P<answer>(['\"]).*\3)$")


def python_blocks(path):
    """The text of each ```python block of the Markdown file at `path`."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def check_promises(block, namespace):
    """Evaluates each `call(...)  # "answer"` line of `block` in `namespace`
    and checks that it gives that answer (a trailing "..." promises only the
    start); returns how many lines promised one."""
    promised = 0
    for line in block.splitlines():
        found = PROMISE.match(line)
        if found:
            answer = eval(found["call"], namespace)
            expected = ast.literal_eval(found["answer"])
            if expected.endswith("..."):
                assert answer.startswith(expected[:-3]), (line, answer)
            else:
                assert answer == expected, (line, answer)
            promised += 1
    return promised
