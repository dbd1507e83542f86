"""A structured-output answer: `generate(response_format=...)` beside the batch.

The continuous batch moves each structured request's automaton on between
its compiled calls, so it takes them when a call decodes one step (the
default `--steps-per-call 1`); with more steps per call a request with a
`response_format` runs through `CausalLM.generate` (its `constrained`
strategy) on a thread of its own, one such request at a time, while the
batch goes on decoding the others.
The answer comes whole: it is one delta to `deltas()` (a streamed request
gets it as one chunk). Its interface is `GenerationStream`'s, so the
routes answer both alike.
"""

import asyncio

from keras_tfm.serving.api_errors import ApiError
from keras_tfm.serving.text_stream import TextStream


def generate_settings(settings, response_format):
    """`generate`'s keyword settings for an OpenAI request's `settings`
    (`openai_fields.sampling_settings`): greedy at temperature 0, else
    top-p sampling from the request's seed."""
    chosen = dict(
        response_format=response_format,
        presence_penalty=settings["presence_penalty"],
        frequency_penalty=settings["frequency_penalty"],
        stop_strings=settings["stop"] or None,
    )
    if settings["temperature"] > 0:
        chosen.update(
            sampler="top_p", temperature=settings["temperature"],
            top_p=settings["top_p"], seed=settings["seed"],
        )  # fmt: skip
    return chosen


class StructuredAnswer:
    """Generates one prompt's answer under `response_format` on `executor`.

    After `deltas()`, `finish_reason` is "stop" (the end token or a stop
    string) or "length", and `completion_tokens` counts the new tokens
    (the end token included). No log-probabilities (`take_logprobs` is
    always empty): the server refuses `logprobs` with `response_format`.

    Args:
        executor: the one-thread executor structured answers run on.
        model: the served `CausalLM`.
        prompt: token ids.
        max_tokens: the new-token budget.
        end_token_id: the id that ends the answer.
        detokenize: ids to text.
        settings: the request's sampling settings.
        response_format: the checked `response_format`.
    """

    def __init__(
        self, executor, model, prompt, max_tokens, end_token_id, detokenize,
        settings, response_format,
    ):  # fmt: skip
        self.end_token_id = end_token_id
        self.finish_reason = None
        self.completion_tokens = 0
        self.cached_tokens = 0  # answered by `generate`, without the prefix cache
        self._text = TextStream(detokenize, settings["stop"])
        self._prompt = [int(t) for t in prompt]
        keywords = generate_settings(settings, response_format)
        self._future = asyncio.get_running_loop().run_in_executor(
            executor, lambda: model.generate(self._prompt, max_tokens, **keywords)
        )

    async def deltas(self):
        """The answer's text, as one piece."""
        try:
            row = await self._future
        except ValueError as error:  # e.g. no automaton over this vocabulary
            raise ApiError(400, str(error), param="response_format") from None
        except Exception as error:
            raise ApiError(500, f"The model failed: {error}") from None
        new = [int(t) for t in row[len(self._prompt) :]]
        self.completion_tokens = len(new)
        ended = bool(new) and new[-1] == self.end_token_id
        text = "".join(self._text.push(t)[0] for t in (new[:-1] if ended else new))
        tail, _ = self._text.flush()
        text += tail
        stopped = ended or self._text.stopped
        self.finish_reason = "stop" if stopped else "length"
        if text:
            yield text

    def take_logprobs(self):
        return []
