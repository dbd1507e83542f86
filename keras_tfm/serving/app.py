"""The OpenAI-compatible routes, as a Starlette application.

Why Starlette (with uvicorn): it is the small, well-maintained ASGI core
that FastAPI itself is built on (Encode's, BSD-licensed, released often),
with streaming responses and lifespan events built in, and nothing more;
FastAPI would add pydantic models whose error JSON is not OpenAI's, which
this server must answer with. uvicorn is the reference ASGI server, and
its shutdown on SIGTERM (stop accepting, wait for open requests) is the
one the issue asks for.

Routes: POST /v1/chat/completions, POST /v1/completions, POST
/v1/embeddings, GET /v1/models, GET /health, GET /metrics, and vLLM's
POST /tokenize, POST /detokenize, GET /tokenizer_info. A causal LM serves
the completions and the tokenizer routes (chat needs a chat template), a
sentence encoder the embeddings.
"""

import asyncio
import base64
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from keras_tfm.generation import grammar
from keras_tfm.generation.continuous_batching.scheduler import Scheduler
from keras_tfm.generation.stop_strings import token_bytes
from keras_tfm.models import CausalLM, Seq2SeqLM
from keras_tfm.serving import defaults
from keras_tfm.serving import openai_fields as fields
from keras_tfm.serving.api_errors import ApiError, read_json
from keras_tfm.serving.api_key import RequireApiKey, check_api_key
from keras_tfm.serving.generation_stream import GenerationStream
from keras_tfm.serving.metrics import CountAnswers, ServerMetrics
from keras_tfm.serving.prompt_logprobs import prompt_logprobs
from keras_tfm.serving.structured_answer import StructuredAnswer
from keras_tfm.serving.text_stream import as_text
from keras_tfm.serving.token_logprobs import TokenLogprobs
from keras_tfm.serving.tokenizer_routes import TokenizerRoutes

ROUTES = (
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
    "/health", "/metrics", "/tokenize", "/detokenize", "/tokenizer_info",
)  # fmt: skip


class Service:
    """The served model and what each route does with it.

    Args:
        model: a `CausalLM` with a tokenizer, or a `SentenceEncoder`.
        model_id: the name clients pass as `model`.
        max_batch: the decoding slots (a causal LM).
        max_length: positions per slot; default the model's, at most 2048.
        steps_per_call: tokens per slot per compiled decode call.
        max_body_bytes: the largest request body accepted.
        api_key: the bearer key every route but /health and /metrics
            asks for (`keras_tfm.serving.api_key`), or None: none.
        prefix_cache_mb: the most MiB of the prefix cache, the keys and
            values of earlier prompts' blocks that a prompt starting with
            the same tokens reuses (0: none); the reused tokens are
            reported as `usage.prompt_tokens_details.cached_tokens`.
        prefill_chunk: the most prompt tokens prefilled between two
            decoding calls (`Scheduler`; None: every prompt at once).
    """

    def __init__(
        self, model, model_id, max_batch=defaults.MAX_BATCH, max_length=None,
        steps_per_call=defaults.STEPS_PER_CALL,
        max_body_bytes=defaults.MAX_BODY_BYTES, api_key=None,
        prefix_cache_mb=defaults.PREFIX_CACHE_MB,
        prefill_chunk=defaults.PREFILL_CHUNK,
    ):  # fmt: skip
        self.model = model
        self.model_id = model_id
        self.max_body_bytes = max_body_bytes
        self.api_key = None if api_key is None else check_api_key(api_key)
        self.created = int(time.time())
        if isinstance(model, Seq2SeqLM):
            raise ValueError(
                "`keras-tfm serve` does not serve sequence-to-sequence models "
                "(a translator, a summariser): its continuous batch holds "
                "decoder-only key/value caches, with no per-slot encoder "
                "context. Call the model's `generate` directly. Received: a "
                f"{type(model).__name__}"
            )
        self.generates = isinstance(model, CausalLM)
        self._pieces = None  # each token's bytes, for logprobs (on first use)
        tokenizer = getattr(model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                "`keras-tfm serve` needs a model with a tokenizer attached. "
                f"Received: a {type(model).__name__} without one"
            )
        self.tokenizer = tokenizer
        self.chats = callable(getattr(tokenizer, "apply_chat_template", None))
        self.scheduler = None
        self.encoder_thread = None
        self.scorer = None
        self.structured = None
        self.encoding = 0  # embedding requests taken and not yet answered
        if self.generates:
            if isinstance(prefix_cache_mb, bool) or not (
                isinstance(prefix_cache_mb, (int, float)) and prefix_cache_mb >= 0
            ):
                raise ValueError(
                    "`prefix_cache_mb` must be a number >= 0 (0: no prefix "
                    f"cache). Received: prefix_cache_mb={prefix_cache_mb!r}"
                )
            self.scheduler = Scheduler(
                model, max_batch, max_length, steps_per_call,
                prefix_cache_bytes=int(prefix_cache_mb * (1 << 20)),
                prefill_chunk=prefill_chunk,
            )  # fmt: skip
            # `echo`'s forward passes, beside the scheduler's thread.
            self.scorer = ThreadPoolExecutor(1, "keras-tfm-scorer")
            # `response_format`'s automata, built beside the event loop (and
            # with --steps-per-call above 1 its answers: structured_answer).
            self.structured = ThreadPoolExecutor(1, "keras-tfm-structured")
        elif callable(getattr(model, "encode", None)):
            # One thread owns the model, as the scheduler's does.
            self.encoder_thread = ThreadPoolExecutor(1, "keras-tfm-encoder")
        else:
            raise ValueError(
                "`keras-tfm serve` serves a CausalLM (chat and completions) or "
                f"a SentenceEncoder (embeddings). Received: {type(model).__name__}"
            )
        self.metrics = ServerMetrics(self.scheduler, ROUTES)

    # === Lifespan ===

    def start(self):
        if self.scheduler is not None:
            self.scheduler.start(prompt_lengths=self.warm_up_lengths())

    def warm_up_lengths(self):
        """The prompt lengths whose prefill is compiled before the first
        request: one token, and with a chat template the template around a
        short question and around a question four times as long (the
        lengths a chat client's first turns take)."""
        if not self.chats:
            return (1,)
        lengths = [1]
        for words in (8, 32):
            message = [{"role": "user", "content": " ".join(["word"] * words)}]
            text = self.tokenizer.apply_chat_template(message)
            lengths.append(len(self.tokenizer(text)))
        return tuple(lengths)

    def stop(self):
        if self.scheduler is not None:
            self.scheduler.stop()
        for thread in (self.encoder_thread, self.scorer, self.structured):
            if thread is not None:
                thread.shutdown()

    # === Routes ===

    async def health(self, request):
        error = self.scheduler is not None and self.scheduler.error
        body = {"status": "error" if error else "ok", "model": self.model_id}
        body["busy"] = (
            self.encoding if self.scheduler is None else self.scheduler.busy()
        )
        return JSONResponse(body, status_code=500 if error else 200)

    async def models(self, request):
        card = {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "keras-tfm",
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def chat_completions(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.CHAT_FIELDS, self.model_id)
        self._require(self.chats, "/v1/chat/completions", "a chat template")
        messages = fields.chat_messages(body)
        settings = fields.sampling_settings(body)
        settings["response_format"] = fields.response_format(body, settings)
        text = self.tokenizer.apply_chat_template(messages)
        prompt = [int(i) for i in self.tokenizer(text)]
        limit = fields.max_tokens(
            body, len(prompt), self.scheduler.max_length,
            ("max_completion_tokens", "max_tokens"),
        )  # fmt: skip
        return await self._answer(request, prompt, limit, settings, chat=True)

    async def completions(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.COMPLETION_FIELDS, self.model_id)
        self._require(self.generates, "/v1/completions", "a causal LM")
        prompts = fields.completion_prompts(body, self.model.backbone.vocabulary_size)
        settings = fields.sampling_settings(body, chat=False)
        echo = fields.echo(body)
        settings["response_format"] = fields.response_format(body, settings, echo)
        rows = [
            [int(i) for i in self.model.preprocessor.generate_preprocess([p])[0]]
            if isinstance(p, str) else p
            for p in prompts
        ]  # fmt: skip
        limits = [self._completion_limit(body, len(row), echo) for row in rows]
        if settings["stream"] and (len(rows) > 1 or limits[0] == 0):
            raise fields.bad(
                "stream", "false with several prompts or max_tokens=0 (their "
                "answers come whole)", True,
            )  # fmt: skip
        prefixes = [None] * len(rows)
        if echo:
            texts = [p if isinstance(p, str) else self._detokenize(p) for p in prompts]
            scores = await self._prompt_scores(rows, settings)
            prefixes = list(zip(texts, scores, strict=True))
        if settings["stream"]:
            return await self._answer(
                request, rows[0], limits[0], settings, chat=False, prefix=prefixes[0]
            )
        choices = await asyncio.gather(*[
            self._completion_choice(i, row, limit, settings, prefix)
            for i, (row, limit, prefix) in enumerate(
                zip(rows, limits, prefixes, strict=True)
            )
        ])  # fmt: skip
        usage = _usage(
            sum(len(row) for row in rows),
            sum(c.pop("tokens") for c in choices),
            sum(c.pop("cached") for c in choices),
        )
        return JSONResponse(dict(self._meta(False), choices=choices, usage=usage))

    async def embeddings(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.EMBEDDING_FIELDS, self.model_id)
        self._require(
            self.encoder_thread is not None, "/v1/embeddings", "a sentence encoder"
        )
        texts, encoding = fields.embedding_inputs(body)
        loop = asyncio.get_running_loop()
        self.encoding += 1
        try:
            vectors = await loop.run_in_executor(
                self.encoder_thread, self.model.encode, texts
            )
        except ValueError as error:
            raise ApiError(400, str(error), param="input") from None
        finally:
            self.encoding -= 1
        packed = self.model.preprocessor.pack_texts(texts, trim=False)
        tokens = int(np.sum(packed["padding_mask"]))  # [CLS] and [SEP] included
        self.metrics.prompt_tokens.inc(tokens)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(v, encoding)}
            for i, v in enumerate(np.asarray(vectors, "float32"))
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse(
            {"object": "list", "data": data, "model": self.model_id, "usage": usage}
        )

    # === Generation ===

    def _require(self, ok, route, what):
        if not ok:
            raise ApiError(
                400,
                f"{route} needs {what}; the model {self.model_id!r} is a "
                f"{type(self.model).__name__}.",
                param="model",
                code="unsupported_route",
            )

    def _detokenize(self, ids):
        return as_text(self.tokenizer.detokenize(ids))

    def _logprobs_format(self, settings, chat):
        """A `TokenLogprobs` for one answer, or None when not asked for."""
        if not settings["logprobs"]:
            return None
        if self._pieces is None:
            size = self.model.backbone.vocabulary_size
            self._pieces = token_bytes(self.tokenizer, size)
        return TokenLogprobs(self._pieces, chat, settings["top_logprobs"])

    def _completion_limit(self, body, prompt_length, echo):
        """The new-token budget of one prompt: `max_tokens` (16 by default,
        as OpenAI's), or 0 with `echo` (the prompt's scores alone)."""
        max_length = self.scheduler.max_length
        value = body.get("max_tokens")
        if echo and fields.is_id(value) and value == 0:
            if prompt_length > max_length:
                raise ApiError(
                    400,
                    f"This model's context is {max_length} tokens and the prompt "
                    f"has {prompt_length}: too long to score.",
                    param="prompt",
                    code="context_length_exceeded",
                )
            return 0
        if value is None:  # OpenAI's default for completions
            body = dict(body, max_tokens=min(16, max_length - prompt_length))
        return fields.max_tokens(body, prompt_length, max_length)

    async def _prompt_scores(self, rows, settings):
        """Each prompt's `prompt_logprobs` when logprobs are asked for (one
        prompt at a time: a pass holds (tokens, vocabulary) floats), else
        None per prompt."""
        if not settings["logprobs"]:
            return [None] * len(rows)
        loop = asyncio.get_running_loop()
        scores = []
        for row in rows:
            try:
                scores.append(await loop.run_in_executor(
                    self.scorer, prompt_logprobs, self.model, row,
                    settings["top_logprobs"],
                ))  # fmt: skip
            except Exception as error:
                raise ApiError(
                    500, f"The model failed scoring the prompt: {error}"
                ) from None
        return scores

    def _automaton(self, response_format):
        """The `TokenAutomaton` of a checked `response_format` over the
        model's tokens, ending on its end token (as `generate`'s)."""
        try:
            return grammar.cached_automaton(
                self.tokenizer, self.model.backbone.vocabulary_size,
                grammar.response_format_regex(response_format),
                (self.model.preprocessor.end_token_id,),
            )  # fmt: skip
        except ValueError as error:  # e.g. no automaton over this vocabulary
            raise ApiError(400, str(error), param="response_format") from None

    def _meta(self, chat):
        return {
            "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_id,
        }

    async def _submit(self, prompt, max_tokens, settings):
        """A `GenerationStream` of `prompt`, timed and submitted, under the
        automaton of its `response_format` if it has one; with a
        `response_format` and more than one step per call, a
        `StructuredAnswer` (beside the batch)."""
        end_token_id = self.model.preprocessor.end_token_id
        response_format = settings.get("response_format")
        automaton = None
        if response_format is not None:
            if self.scheduler.decoder.steps_per_call > 1:
                self.metrics.prompt_tokens.inc(len(prompt))
                return StructuredAnswer(
                    self.structured, self.model, prompt, max_tokens, end_token_id,
                    self._detokenize, settings, response_format,
                )  # fmt: skip
            automaton = await asyncio.get_running_loop().run_in_executor(
                self.structured, self._automaton, response_format
            )
        stream = GenerationStream(
            self.scheduler, prompt, max_tokens, end_token_id, self._detokenize,
            settings, automaton,
        )  # fmt: skip
        self.metrics.watch(stream.request)
        stream.submit()
        self.metrics.prompt_tokens.inc(len(prompt))
        return stream

    async def _text(self, stream):
        """The whole answer's text (its tokens counted, however it ends)."""
        try:
            return "".join([delta async for delta in stream.deltas()])
        finally:
            self.metrics.completion_tokens.inc(stream.completion_tokens)

    async def _completion_choice(self, index, prompt, max_tokens, settings, prefix):
        """One prompt's choice, with its completion tokens under "tokens";
        `prefix` the echoed `(text, scores)`, or None."""
        logprobs = self._logprobs_format(settings, chat=False)
        text, scores = prefix or ("", None)
        reason, tokens, cached, answer = "length", 0, 0, []
        if max_tokens > 0:
            stream = await self._submit(prompt, max_tokens, settings)
            text += await self._text(stream)
            reason, tokens = stream.finish_reason, stream.completion_tokens
            cached = stream.cached_tokens
            answer = stream.take_logprobs()
            if prefix is not None:
                answer += _end_token_score(stream, len(answer))
        choice = {"index": index, "text": text, "finish_reason": reason,
                  "logprobs": None, "tokens": tokens, "cached": cached}  # fmt: skip
        if logprobs is not None:
            choice["logprobs"] = _echoed(logprobs, scores, answer)
        return choice

    async def _answer(self, request, prompt, max_tokens, settings, chat, prefix=None):
        stream = await self._submit(prompt, max_tokens, settings)
        meta = self._meta(chat)
        logprobs = self._logprobs_format(settings, chat)
        if settings["stream"]:
            events = _events(
                stream, meta, len(prompt), chat, settings["include_usage"], logprobs,
                prefix, self.metrics.completion_tokens.inc,
            )  # fmt: skip
            return StreamingResponse(
                events, media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )  # fmt: skip
        text = await self._text(stream)
        choice = {"index": 0, "finish_reason": stream.finish_reason, "logprobs": None}
        if logprobs is not None:
            choice["logprobs"] = logprobs(stream.take_logprobs())
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        usage = _usage(len(prompt), stream.completion_tokens, stream.cached_tokens)
        return JSONResponse(dict(meta, choices=[choice], usage=usage))


def _end_token_score(stream, kept):
    """[the end token's `(token_id, logprob, alternatives)`] when the
    answer ended with it, else []. The stream keeps the scores of the
    tokens it turned into text (`kept` of them) and counts the end token
    too, so the two differ by one exactly when the end token came. Echoed,
    the scores hold one entry per prompt token and per generated token (as
    `usage` counts them, and as vLLM's do), so that lm-eval's
    `token_logprobs[ctxlen:-1]` cuts off the generated token and nothing
    else."""
    count = stream.completion_tokens
    if count != kept + 1:
        return []
    request = stream.request  # its lists hold every generated token's scores
    alternatives = request.alternatives[count - 1] if request.top_logprobs else []
    return [(stream.end_token_id, request.logprobs[count - 1], alternatives)]


def _echoed(logprobs, prompt_scores, answer_scores):
    """The completions `logprobs` of an echoed prompt's scores (or None:
    not echoed) and the answer's, the first prompt token's alternatives
    None (nothing precedes it), as OpenAI's."""
    formatted = logprobs((prompt_scores or []) + answer_scores)
    if prompt_scores and formatted["top_logprobs"] is not None:
        formatted["top_logprobs"][0] = None
    return formatted


def _usage(prompt_tokens, completion_tokens, cached_tokens):
    """OpenAI's `usage`; `cached_tokens`: the prompt tokens the prefix cache
    gave (as vLLM and llama.cpp's server report them)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def _encode(vector, encoding):
    if encoding == "base64":  # little-endian float32, as OpenAI sends
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def _events(
    stream, meta, prompt_tokens, chat, include_usage, logprobs, prefix, count
):  # fmt: skip
    """Server-sent events: the echoed `prefix` `(text, scores)` (or None),
    one chunk per delta (with its tokens' logprobs when `logprobs` formats
    them), the finish, then [DONE]; `count(n)` is told the tokens
    generated, however the stream ends."""
    meta = dict(meta, object=meta["object"] + ".chunk" if chat else meta["object"])
    try:
        async for event in _chunks(
            stream, meta, prompt_tokens, chat, include_usage, logprobs, prefix
        ):
            yield event
    finally:
        count(stream.completion_tokens)


async def _chunks(stream, meta, prompt_tokens, chat, include_usage, logprobs, prefix):
    kept = 0  # the answer's scores sent so far

    def chunk(delta, finish_reason=None):
        nonlocal kept
        choice = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
        pairs = stream.take_logprobs()
        kept += len(pairs)
        if finish_reason is not None and prefix is not None:
            pairs += _end_token_score(stream, kept)
        if logprobs is not None and pairs:
            choice["logprobs"] = logprobs(pairs)
        if chat:
            choice["delta"] = {"content": delta} if delta is not None else {}
        else:
            choice["text"] = delta or ""
        return _sse(dict(meta, choices=[choice]))

    if chat:
        first = {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None, "logprobs": None}  # fmt: skip
        yield _sse(dict(meta, choices=[first]))
    if prefix is not None:
        text, scores = prefix
        first = {"index": 0, "text": text, "finish_reason": None, "logprobs": None}
        if logprobs is not None:
            first["logprobs"] = _echoed(logprobs, scores, [])
        yield _sse(dict(meta, choices=[first]))
    try:
        async for delta in stream.deltas():
            yield chunk(delta)
    except ApiError as error:
        yield _sse({"error": {"message": error.message, "type": "server_error"}})
        return
    yield chunk(None, stream.finish_reason)
    if include_usage:
        usage = _usage(prompt_tokens, stream.completion_tokens, stream.cached_tokens)
        yield _sse(dict(meta, choices=[], usage=usage))
    yield "data: [DONE]\n\n"


def _sse(payload):
    return f"data: {json.dumps(payload)}\n\n"


async def _api_error(request, error):
    return error.response()


async def _http_error(request, error):
    return ApiError(error.status_code, f"{error.detail}: {request.url.path}").response()


def build_app(service):
    """The Starlette application of a `Service`, with its lifespan."""

    @asynccontextmanager
    async def lifespan(app):
        service.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, service.stop)

    routes = [
        Route("/v1/chat/completions", service.chat_completions, methods=["POST"]),
        Route("/v1/completions", service.completions, methods=["POST"]),
        Route("/v1/embeddings", service.embeddings, methods=["POST"]),
        Route("/v1/models", service.models, methods=["GET"]),
        Route("/health", service.health, methods=["GET"]),
        Route("/metrics", service.metrics.route, methods=["GET"]),
    ]
    if service.generates:  # vLLM's, for lm-eval's "remote" tokenizer
        tokenizer = TokenizerRoutes(service)
        routes += [
            Route("/tokenize", tokenizer.tokenize, methods=["POST"]),
            Route("/detokenize", tokenizer.detokenize, methods=["POST"]),
            Route("/tokenizer_info", tokenizer.tokenizer_info, methods=["GET"]),
        ]
    # The first is the outermost: the answers of refused keys are counted.
    middleware = [Middleware(CountAnswers, metrics=service.metrics)]
    if service.api_key is not None:
        middleware.append(Middleware(RequireApiKey, key=service.api_key))
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=middleware,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
