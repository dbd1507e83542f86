"""One request's tokens, carried from the worker thread to the event loop.

The scheduler calls back in its own thread; `GenerationStream` hands each
token to an `asyncio.Queue` of the request's event loop, turns tokens into
text (`TextStream`: deltas, stop strings) and cancels the request when its
reader goes away (a client that disconnects frees its slot at the next
call boundary).
"""

import asyncio

from keras_tfm.generation.continuous_batching.scheduler import SlotRequest
from keras_tfm.serving.api_errors import ApiError
from keras_tfm.serving.text_stream import TextStream


class GenerationStream:
    """Submits a prompt and iterates over its text deltas.

    After the iteration, `finish_reason` is "stop" or "length",
    `completion_tokens` counts the tokens generated (up to a stop string,
    the end token included) and `cached_tokens` the prompt's tokens the
    prefix cache gave. `take_logprobs()` hands over the
    `(token_id, logprob, alternatives)` of the answer's tokens (the end
    token aside) received since it was last called, `alternatives` the
    step's `top_logprobs` most likely `(token_id, logprob)` pairs (or []).

    Args:
        scheduler: the running `Scheduler`.
        prompt: token ids.
        max_tokens: the new-token budget.
        end_token_id: the id that ends the answer, or None.
        detokenize: ids to text.
        settings: `temperature`, `top_p`, `seed`, `presence_penalty`,
            `frequency_penalty`, `top_logprobs` and `stop` (strings).
        automaton: structured output's `grammar.TokenAutomaton`, or None.
    """

    def __init__(
        self, scheduler, prompt, max_tokens, end_token_id, detokenize, settings,
        automaton=None,
    ):  # fmt: skip
        self.scheduler = scheduler
        self.end_token_id = end_token_id
        self.text = TextStream(detokenize, settings["stop"])
        self.finish_reason = None
        self.completion_tokens = 0
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._logprobs = []
        names = ("temperature", "top_p", "seed", "presence_penalty",
                 "frequency_penalty", "top_logprobs")  # fmt: skip
        self.request = SlotRequest(
            prompt, max_tokens, self._on_token, self._on_finish,
            **{name: settings[name] for name in names}, automaton=automaton,
        )  # fmt: skip

    def _on_token(self, token):  # the worker thread
        request = self.request
        scores = request.logprobs[-1], (
            request.alternatives[-1] if request.top_logprobs else []
        )
        self._loop.call_soon_threadsafe(
            self._queue.put_nowait, ("token", (token, *scores))
        )
        return token == self.end_token_id

    def _on_finish(self, reason):  # the worker thread
        self._loop.call_soon_threadsafe(self._queue.put_nowait, ("finish", reason))

    def submit(self):
        try:
            self.scheduler.submit(self.request)
        except RuntimeError as error:  # stopping
            raise ApiError(503, str(error), code="shutting_down") from None
        except ValueError as error:
            raise ApiError(400, str(error), code="context_length_exceeded") from None

    async def deltas(self):
        """The answer's text pieces; the request is cancelled on exit."""
        try:
            while True:
                kind, value = await self._queue.get()
                if kind == "finish":
                    if value.startswith("error"):
                        raise ApiError(500, f"The model failed: {value}")
                    tail, stopped = self.text.flush()
                    stopped = stopped or value != "length"
                    self.finish_reason = "stop" if stopped else "length"
                    if tail:
                        yield tail
                    return
                self.completion_tokens += 1
                token = value[0]
                if token == self.end_token_id:
                    continue  # the finish follows
                self._logprobs.append(value)
                delta, stopped = self.text.push(token)
                if delta:
                    yield delta
                if stopped:
                    self.finish_reason = "stop"
                    return
        finally:
            self.request.cancel()  # a no-op once the slot is free

    @property
    def cached_tokens(self):
        return self.request.cached_tokens

    def take_logprobs(self):
        """The `(token_id, logprob, alternatives)` received since the last
        call."""
        taken, self._logprobs = self._logprobs, []
        return taken
