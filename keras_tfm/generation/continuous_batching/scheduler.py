"""Continuous batching: requests join and leave a running decode loop.

One worker thread owns the model. Between two compiled decode calls it
(1) frees the slots of finished or cancelled requests, (2) prefills waiting
requests into free slots, (3) decodes `steps_per_call` tokens (default 1)
for every occupied slot in one call and hands each request its tokens. A request
never waits for another to finish: it joins at the next call boundary.
With `prefill_chunk`, a prompt longer than that (its cached blocks aside)
is prefilled one chunk per call boundary (vLLM's chunked prefill), so the
other slots go on decoding between its chunks instead of waiting for the
whole prompt.
"""

import queue
import threading

import numpy as np

from keras_tfm.generation.continuous_batching.slot_decoder import SlotDecoder

# The most alternatives a request may ask for (OpenAI's `top_logprobs` limit).
MAX_TOP_LOGPROBS = 20

# The per-request sampling settings, in `SlotDecoder`'s order, and the
# value an empty slot decodes with.
SETTINGS = {
    "temperature": 0.0, "top_p": 1.0, "seed": 0, "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}  # fmt: skip


class SlotRequest:
    """One generation: the prompt, its settings, and where its tokens go.

    `on_token(token_id)` is called in the worker thread for every new token
    (its log-probability is appended to `logprobs` first, and with
    `top_logprobs` n > 0 the list of its step's n most likely
    `(token_id, logprob)` pairs to `alternatives`) and returns True
    when the request is complete (an end token, a stop string, enough
    tokens); `on_finish(reason)` is called once at the end,
    with "stop", "length", "cancelled" or "error: ...". `cancel()` (from any
    thread) frees the slot at the next call boundary. Once admitted,
    `cached_tokens` says how many of the prompt's tokens the prefix cache
    gave (0 without one). With an `automaton` (structured output), each
    token is one the automaton allows after the ones before it.

    Args:
        prompt: the prompt's token ids.
        max_tokens: the most new tokens.
        on_token, on_finish: the callbacks above.
        temperature: 0 for greedy decoding.
        top_p: the nucleus cut-off (1: none).
        seed: the seed of the request's random numbers.
        presence_penalty, frequency_penalty: OpenAI's penalties on the
            tokens generated so far (0: none).
        top_logprobs: how many of each step's most likely tokens to keep
            (0: none; at most the scheduler's `top_logprobs`).
        automaton: a `grammar.TokenAutomaton` the answer must follow from
            its state 0, or None.
    """

    def __init__(
        self, prompt, max_tokens, on_token, on_finish, temperature=0.0,
        top_p=1.0, seed=0, presence_penalty=0.0, frequency_penalty=0.0,
        top_logprobs=0, automaton=None,
    ):  # fmt: skip
        self.prompt = [int(t) for t in prompt]
        self.max_tokens = max_tokens
        self.on_token = on_token
        self.on_finish = on_finish
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = int(seed)
        self.presence_penalty = float(presence_penalty)
        self.frequency_penalty = float(frequency_penalty)
        self.top_logprobs = int(top_logprobs)
        self.automaton = automaton
        self.state = 0  # the automaton's, after the tokens generated so far
        self.generated = 0
        self.cached_tokens = 0
        self.logprobs = []
        self.alternatives = []
        self.cancelled = threading.Event()

    def cancel(self):
        self.cancelled.set()


class Scheduler:
    """The worker thread, its queue of waiting requests and the slots.

    Args:
        model: a `keras_tfm.models.CausalLM`.
        num_slots: the most requests decoded together (`--max-batch`).
        max_length: positions per slot (prompt plus answer); default the
            model's `max_sequence_length`, at most 2048.
        steps_per_call: tokens per slot per compiled call.
        top_logprobs: the most alternatives a request may ask for (every
            step computes that many; at most the vocabulary size).
        prefix_cache_bytes: the most bytes of the cache of prompt blocks
            that later prompts starting with the same tokens reuse (0:
            none; `SlotDecoder`).
        prefill_chunk: the most prompt tokens prefilled between two decode
            calls (a multiple of 16; None: every prompt at once).

    Example:
    >>> from keras_tfm.generation.continuous_batching import Scheduler, SlotRequest
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=32)
    >>> scheduler = Scheduler(keras_tfm.models.CausalLM(backbone), num_slots=2)
    >>> scheduler.start()
    >>> tokens, done = [], threading.Event()
    >>> request = SlotRequest([5, 6, 7], 4, lambda t: tokens.append(t) or False,
    ...                       lambda reason: done.set())
    >>> scheduler.submit(request)
    >>> done.wait(60), len(tokens)
    (True, 4)
    >>> scheduler.stop()
    """

    def __init__(
        self, model, num_slots=8, max_length=None, steps_per_call=1,
        top_logprobs=MAX_TOP_LOGPROBS, prefix_cache_bytes=0, prefill_chunk=None,
    ):  # fmt: skip
        if prefill_chunk is not None and (
            isinstance(prefill_chunk, bool)
            or not isinstance(prefill_chunk, int)
            or prefill_chunk < 16
            or prefill_chunk % 16
        ):
            raise ValueError(
                "`prefill_chunk` must be a multiple of 16 tokens, or None. "
                f"Received: prefill_chunk={prefill_chunk!r}"
            )
        self.prefill_chunk = prefill_chunk
        if max_length is None:
            max_length = min(model.backbone.max_sequence_length, 2048)
        top_logprobs = min(top_logprobs, model.backbone.vocabulary_size)
        self.decoder = SlotDecoder(
            model, num_slots, max_length, steps_per_call, top_logprobs,
            prefix_cache_bytes,
        )  # fmt: skip
        self.max_length = self.decoder.max_length
        self.slots = [None] * num_slots
        self._last = [0] * num_slots  # per slot: the token not yet in the cache
        self._position = [0] * num_slots  # ... and its position
        self._answer = [[] for _ in range(num_slots)]  # per slot, its tokens
        self._prefilled = {}  # slot -> prompt tokens in it, while chunked
        # Per slot, the tokens its next step may choose (an automaton's).
        self._allowed = np.ones((num_slots, model.backbone.vocabulary_size), bool)
        self._waiting = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="keras-tfm-scheduler", daemon=True
        )
        self.error = None

    def start(self, warm_up=True, prompt_lengths=(1,)):
        """Starts the worker; first compiles the decoding call and the
        prefill of each padded length `prompt_lengths` need (the shortest
        prompts' by default), with a prefix cache also after cached
        blocks, unless `warm_up=False`."""
        if warm_up:
            decoder = self.decoder
            padded = {
                decoder.padded_length(min(n, self.max_length - 1))
                for n in prompt_lengths
            }
            for length in sorted(padded):
                decoder.compile_prefill(length)
            n = len(self.slots)
            decoder.decode([0] * n, [0] * n)
            decoder.compile_keep()
        self._thread.start()

    def submit(self, request):
        """Queues `request`; it joins the batch at the next call boundary."""
        if self._stopping.is_set():
            raise RuntimeError("The scheduler is stopping: no new requests.")
        if request.top_logprobs > MAX_TOP_LOGPROBS:
            raise ValueError(
                f"`top_logprobs` must be at most {MAX_TOP_LOGPROBS}. "
                f"Received: top_logprobs={request.top_logprobs}"
            )
        if request.automaton is not None and self.decoder.steps_per_call > 1:
            raise ValueError(
                "A request with an automaton (structured output) needs one "
                "decoding step per call (its next tokens depend on each token); "
                f"this scheduler decodes steps_per_call={self.decoder.steps_per_call}."
            )
        if len(request.prompt) + request.max_tokens > self.max_length:
            raise ValueError(
                f"A prompt of {len(request.prompt)} tokens plus max_tokens="
                f"{request.max_tokens} does not fit a slot of {self.max_length} "
                "positions."
            )
        self._waiting.put(request)

    def stop(self, timeout=None):
        """Finishes the requests in flight and the waiting ones, then ends."""
        self._stopping.set()
        self._waiting.put(None)  # wakes an idle worker
        self._thread.join(timeout)

    def busy(self):
        """The number of occupied slots and waiting requests."""
        return sum(s is not None for s in self.slots) + self._waiting.qsize()

    # === The worker thread ===

    def _run(self):
        try:
            while True:
                self._free_cancelled()
                self._prefill_chunks()  # one chunk per boundary, the first
                self._admit()  # at admission
                if any(s is not None for s in self.slots):
                    self._decode()
                elif self._stopping.is_set() and self._waiting.empty():
                    return
                else:
                    self._admit(block=True)
        except Exception as error:  # the model failed: fail every request
            self.error = error
            for i, request in enumerate(self.slots):
                if request is not None:
                    self._finish(i, f"error: {error}")
            while not self._waiting.empty():
                request = self._waiting.get()
                if request is not None:
                    request.on_finish(f"error: {error}")
            raise

    def _finish(self, slot, reason):
        request, self.slots[slot] = self.slots[slot], None
        self._allowed[slot] = True
        answer, self._answer[slot] = self._answer[slot], []
        held = request.prompt + answer[:-1]
        if slot in self._prefilled:  # cancelled between its chunks
            held = request.prompt[: self._prefilled.pop(slot)]
        if not reason.startswith("error"):  # the slot holds what it decoded
            self.decoder.keep(slot, held)
        request.on_finish(reason)

    def _free_cancelled(self):
        for i, request in enumerate(self.slots):
            if request is not None and request.cancelled.is_set():
                self._finish(i, "cancelled")

    def _admit(self, block=False):
        while None in self.slots:
            try:
                request = self._waiting.get(block=block, timeout=0.5)
            except queue.Empty:
                return
            block = False
            if request is None or request.cancelled.is_set():
                if request is not None:
                    request.on_finish("cancelled")
                continue
            slot = self.slots.index(None)
            prompt, chunk = request.prompt, self.prefill_chunk
            end = len(prompt)
            if chunk is not None:
                end = min(end, self.decoder.cached_length(prompt) + chunk)
            first, logprob, (ids, values), cached = self.decoder.prefill(
                slot, prompt[:end], *self._settings(request)
            )
            request.cached_tokens = cached
            self.slots[slot] = request
            if end < len(prompt):  # the rest in chunks (`_prefill_chunks`)
                self._prefilled[slot] = end
                continue
            self._last[slot], self._position[slot] = first, len(prompt)
            self._deliver(slot, first, logprob, ids, values)

    def _settings(self, request):
        """`SlotDecoder.prefill`'s settings of `request`, its mask last."""
        automaton = request.automaton
        allowed = None if automaton is None else automaton.mask(request.state)
        return (*(getattr(request, name) for name in SETTINGS), allowed)

    def _prefill_chunks(self):
        """One chunk of each prompt being prefilled in chunks; a prompt's
        last chunk gives its first token (and keeps its blocks)."""
        for slot, start in list(self._prefilled.items()):
            request = self.slots[slot]
            prompt = request.prompt
            end = min(len(prompt), start + self.prefill_chunk)
            first, logprob, (ids, values), _ = self.decoder.extend(
                slot, prompt[start:end], start, *self._settings(request)
            )
            if end < len(prompt):
                self._prefilled[slot] = end
                continue
            del self._prefilled[slot]
            self.decoder.keep(slot, prompt)  # the blocks after the first chunk
            self._last[slot], self._position[slot] = first, len(prompt)
            self._deliver(slot, first, logprob, ids, values)

    def _deliver(self, slot, token, logprob, top_ids, top_values):
        """Gives `token` to the slot's request; frees the slot when done."""
        request = self.slots[slot]
        request.generated += 1
        self._answer[slot].append(token)
        if request.automaton is not None:
            # A stop token keeps a final state: the mask stays satisfiable.
            request.state = request.automaton.step(request.state, token)
            self._allowed[slot] = request.automaton.mask(request.state)
        request.logprobs.append(logprob)
        if request.top_logprobs:
            n = request.top_logprobs
            pairs = zip(top_ids[:n], top_values[:n], strict=True)
            request.alternatives.append([(int(i), float(v)) for i, v in pairs])
        if request.on_token(token):
            self._finish(slot, "stop")
        elif request.generated >= request.max_tokens:
            self._finish(slot, "length")

    def _decode(self):
        rows = [
            (i, r)
            for i, r in enumerate(self.slots)
            if r is not None and i not in self._prefilled
        ]
        if not rows:
            return
        settings = [
            [getattr(r, name) if r else value for r in self.slots]
            for name, value in SETTINGS.items()
        ]
        # A slot between chunks writes its step's keys at its last position,
        # which its own decoding overwrites before any query reads it.
        positions = [
            (self.max_length - 1 if i in self._prefilled else p) if r else 0
            for i, (p, r) in enumerate(zip(self._position, self.slots, strict=True))
        ]
        out, logprobs, (ids, values) = self.decoder.decode(
            self._last, positions, *settings, allowed=self._allowed
        )
        for i, request in rows:
            for step, token in enumerate(out[i]):
                if self.slots[i] is not request or request.cancelled.is_set():
                    break
                self._position[i] += 1
                self._last[i] = int(token)
                self._deliver(
                    i, int(token), float(logprobs[i, step]), ids[i, step],
                    values[i, step],
                )  # fmt: skip
