"""`LiteRTChat`: chat answers from a cached LiteRT decoding step.

What a second `keras-tfm chat` runs: the model's decoding step as a
`.tflite` file (`keras_tfm.export.export_litert_decoder`, its key/value cache
inside the interpreter, run by `keras_tfm.lite.litert_decoder.LiteRTDecoder`),
the tokenizer's `tokenizers` pipeline and the checkpoint's chat template, in a process
that imports neither TensorFlow nor Keras. The prompt goes through the
file's `prefill` signature in chunks, then each new token through `decode`.
Greedy decoding takes the argmax of the float32 logits, as `CausalLM.generate`'s
greedy sampler does (NumPy's argmax and TensorFlow's both take the first
maximum); a sampling `GenerationConfig` (temperature, top-k, top-p, min-p,
seed; no logit processor) draws with `keras_tfm.lite.sampling`, the
engine's sampler in NumPy, so a seed samples the TensorFlow path's tokens.
`stream` answers a conversation's turns in the REPL (`keras-tfm chat`
without a message), each running only what the cache does not hold yet.

Example:
>>> # once `keras-tfm chat "..."` has written SmolLM2's entry
>>> from keras_tfm.lite.chat_entries import find_entry
>>> found = find_entry("smollm2_135m_instruct", "float32")
>>> if found:  # doctest: +SKIP
...     print(LiteRTChat(*found).chat("What is the capital of France?"))
The capital of France is Paris.
"""

import numpy as np

from keras_tfm.generation.generation_config import settings_tensors
from keras_tfm.lite import sampling
from keras_tfm.lite.chat_entries import DECODER, TOKENIZER
from keras_tfm.lite.chat_template import render_chat_template
from keras_tfm.lite.litert_decoder import LiteRTDecoder
from keras_tfm.lite.stop_text import text_pieces


class LiteRTChat:
    """A cached chat model in LiteRT's interpreter.

    Args:
        folder: an entry folder (`keras_tfm.lite.chat_entries`).
        entry: its `entry.json`, read.
        num_threads: interpreter threads (default: the CPUs this process
            may use).
        kernels: as `LiteRTDecoder`'s (default "xnnpack", with the
            weights the entry holds packed: a second `keras-tfm chat` maps
            them and stays under 1 GB).
    """

    def __init__(self, folder, entry, num_threads=None, kernels="xnnpack"):
        from tokenizers import Tokenizer

        self.entry = entry
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER))
        self.decoder = LiteRTDecoder(folder / DECODER, num_threads, kernels)
        self.cached_ids = []
        """The token ids whose keys and values the cache holds, in order."""

    @property
    def buffer_length(self):
        return self.entry["buffer_length"]

    def prompt_ids(self, messages):
        """The ids of `messages` in the chat template, with the answer's opening."""
        text = render_chat_template(
            self.entry["chat_template"], messages, **self.entry["template_tokens"]
        )
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def fits(self, prompt, max_new_tokens):
        """Whether the prompt and `max_new_tokens` fit the cached buffer."""
        return len(prompt) + max_new_tokens <= self.buffer_length

    def answer_ids(self, prompt, max_new_tokens, start=0, config=None):
        """Yields the new ids after `prompt`, up to `max_new_tokens` (the
        end-of-turn id included, then stops).

        `start`: how many of `prompt`'s first tokens the cache already holds
        (`cached_ids`, a conversation's earlier turns): only the rest is
        prefilled. `cached_ids` then follows what the cache holds.
        `config`: a `GenerationConfig` without logit processors (None:
        greedy); each token at position i is drawn as the engine draws the
        token at i.
        """
        if not prompt or not self.fits(prompt, max_new_tokens):
            raise ValueError(
                "The prompt and max_new_tokens must fit the cached buffer of "
                f"{self.buffer_length} positions. Received: a prompt of "
                f"{len(prompt)} tokens, max_new_tokens={max_new_tokens}"
            )
        if not 0 <= start <= self.reusable(prompt):
            raise ValueError(
                "`start` must be at most the tokens the cache holds of the "
                f"prompt ({self.reusable(prompt)}). Received: start={start}"
            )
        choose = _chooser(config)
        self.cached_ids = []  # until the prefill has written the prompt
        token = choose(self.decoder.prefill(prompt[start:], start), len(prompt))
        self.cached_ids = list(prompt)
        for index in range(len(prompt), len(prompt) + max_new_tokens - 1):
            yield token
            if token == self.entry["end_token_id"]:
                return
            logits = self.decoder.decode(token, index)
            self.cached_ids.append(token)
            token = choose(logits, index + 1)
        yield token

    def reusable(self, prompt):
        """How many of `prompt`'s first tokens the cache holds, leaving at
        least its last one to run (whose logits give the first new token)."""
        shared = 0
        for cached, token in zip(self.cached_ids, prompt[:-1], strict=False):
            if cached != token:
                break
            shared += 1
        return shared

    def stream(self, messages, max_new_tokens=256, stop_strings=(), config=None):
        """Yields the answer to `messages` in pieces, reusing what the cache
        holds of their prompt: a conversation's next turn runs only its new
        tokens (as `keras_tfm.chat.ChatSession.stream` does)."""
        prompt = self.prompt_ids(messages)
        ids = self.answer_ids(prompt, max_new_tokens, self.reusable(prompt), config)
        return text_pieces(
            self.detokenize, ids, stop_strings, [self.entry["end_token_id"]]
        )

    def chat(
        self, messages, max_new_tokens=256, stop_strings=(), stream=False, config=None
    ):
        """The answer to `messages`, as `CausalLM.chat` gives it.

        Args:
            messages: a string (one user message) or a list of {"role",
                "content"} dicts.
            max_new_tokens: the most tokens the answer may take.
            stop_strings: strings that end the answer (not shown).
            stream: yield the answer's new text as it comes.
            config: how to decode (`answer_ids`; None: greedy).
        """
        ids = self.answer_ids(self.prompt_ids(messages), max_new_tokens, 0, config)
        pieces = text_pieces(
            self.detokenize, ids, stop_strings, [self.entry["end_token_id"]]
        )
        return pieces if stream else "".join(pieces).strip()

    def detokenize(self, ids):
        """The text of `ids` (the answer's leading spaces dropped, as
        `CausalLM.chat` drops them)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False).lstrip()


def _chooser(config):
    """`choose(logits, position) -> id`: the argmax, or the draw of `config`
    (new settings, hence a new seed when it has none, per answer)."""
    if config is None or config.sampler == "greedy":
        return lambda logits, position: int(np.argmax(logits))
    if not sampling.draws(config):
        raise ValueError(
            "The LiteRT chat decodes greedy or samples (temperature, top_k, "
            f"top_p, min_p, seed), with no logit processor. Received: {config}"
        )
    settings = settings_tensors([config])

    def choose(logits, position):
        return int(sampling.next_tokens(logits[None, :], settings, position)[0])

    return choose
