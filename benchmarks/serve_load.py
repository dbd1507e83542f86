"""Load on `keras-tfm serve`: concurrent chat clients against one at a time.

Starts `keras-tfm serve MODEL` as a subprocess on a free 127.0.0.1 port,
waits for it, then sends the same fixed set of greedy chat requests
(`--requests` per client of the largest `--clients`): one at a time (the
sequential baseline), then from each number of `--clients` concurrent
clients, each client sending its share in turn. Every request streams
(server-sent events), so each one's time to first token and per-token
latency are measured on the client. Prints a Markdown table and checks
that every request was answered exactly once (one [DONE] each) and that
each concurrent answer equals its sequential one. With `--structured`, the
largest number of clients sends the same requests again under a JSON
schema (`response_format`, decoded in the batch), every answer that ends
checked to validate. Bounded: clients x
requests requests of at most `--max-tokens` tokens, loopback only, and
every HTTP call has a timeout.

    nice -n 10 python benchmarks/serve_load.py --clients 16 8 --requests 2

With 16 closed-loop clients on 8 slots, half the clients always wait for a
slot: a request's time to first token is then about one answer's
duration (each client's cycle is a wait and an answer, and 8 slots serve
16 clients, so the wait equals the answer). With 8 clients no one queues,
and the time to first token is the join (one decoding step) plus the
prefill.
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import time

import httpx

from keras_tfm.serving.process import free_port, start_server

TOPICS = [
    "the moon", "rivers", "bread", "chess", "volcanoes", "bees", "trains",
    "the ocean", "tea", "maps", "glaciers", "violins", "owls", "deserts",
    "bicycles", "clocks", "salt", "lightning", "forests", "bridges",
]  # fmt: skip
ASKS = ["Write two sentences about {}.", "Give three facts about {}."]


def prompts(count):
    return [
        ASKS[i // len(TOPICS) % 2].format(TOPICS[i % len(TOPICS)]) for i in range(count)
    ]


# `--structured`'s schema: short enough to end within --max-tokens.
SCHEMA = {
    "type": "object", "required": ["topic", "kind"],
    "properties": {"topic": {"type": "string", "maxLength": 24},
                   "kind": {"enum": ["animal", "place", "thing", "idea"]}},
}  # fmt: skip
RESPONSE_FORMAT = {
    "type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}
}  # fmt: skip


async def one(client, url, model, content, max_tokens, response_format=None):
    """Streams one greedy chat answer: its text and client-side timings."""
    body = {
        "model": model, "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    if response_format is not None:
        body["response_format"] = response_format
    start = time.perf_counter()
    first = last = None
    text, tokens, done, finish = [], 0, 0, None
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done += 1
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                finish = choice.get("finish_reason") or finish
                piece = choice["delta"].get("content")
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text.append(piece)
    end = time.perf_counter()
    first, last = first or end, last or end
    per_token = (last - first) / max(tokens - 1, 1)
    return dict(text="".join(text), tokens=tokens, done=done, finish=finish,
                ttft=first - start, per_token=per_token)  # fmt: skip


async def run(url, model, contents, clients, max_tokens, response_format=None):
    """`clients` tasks, each sending its share of `contents` in turn."""
    results = [None] * len(contents)
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def worker(k):
            for i in range(k, len(contents), clients):
                results[i] = await one(
                    client, url, model, contents[i], max_tokens, response_format
                )

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(clients)))
        return results, time.perf_counter() - start


def summary(name, results, seconds):
    tokens = sum(r["tokens"] for r in results)
    ttft = sorted(r["ttft"] for r in results)
    per_token = sorted(r["per_token"] for r in results)

    def pct(values, q):
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    return dict(
        name=name, requests=len(results), seconds=seconds,
        requests_per_s=len(results) / seconds, tokens_per_s=tokens / seconds,
        ttft_p50=statistics.median(ttft), ttft_p95=pct(ttft, 0.95),
        token_p50=statistics.median(per_token), token_p95=pct(per_token, 0.95),
    )  # fmt: skip


def add_request_arguments(parser):
    """The model, the requests and the slots: the options of this load and
    of `serve_replicas.py`'s."""
    parser.add_argument("--model", default="smollm2_135m_instruct")
    parser.add_argument("--requests", type=int, default=2, help="per client")
    parser.add_argument("--max-batch", type=int, default=8, help="slots per server")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-context", type=int, default=512)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_request_arguments(parser)
    parser.add_argument(
        "--clients", type=int, nargs="+", default=[16, 8],
        help="numbers of concurrent clients, one run each",
    )  # fmt: skip
    parser.add_argument("--steps-per-call", type=int, default=1)
    parser.add_argument(
        "--structured", action="store_true",
        help="add a row of the most clients under a JSON schema",
    )  # fmt: skip
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(
        args.model, port, "--max-batch", args.max_batch,
        "--max-context", args.max_context, "--steps-per-call", args.steps_per_call,
    )  # fmt: skip
    try:
        load_at_start = os.getloadavg()[0]
        contents = prompts(max(args.clients) * args.requests)
        # Warm-up: every prompt length bucket the runs use is compiled.
        asyncio.run(run(url, args.model, contents[:2], 1, 4))
        sequential, seq_time = asyncio.run(
            run(url, args.model, contents, 1, args.max_tokens)
        )
        concurrent = [
            asyncio.run(run(url, args.model, contents, clients, args.max_tokens))
            for clients in args.clients
        ]
        structured = None
        if args.structured:  # the automaton built and its loop warm first
            asyncio.run(run(url, args.model, contents[:1], 1, 4, RESPONSE_FORMAT))
            structured = asyncio.run(run(
                url, args.model, contents, max(args.clients), args.max_tokens,
                RESPONSE_FORMAT,
            ))  # fmt: skip
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(120)
    answered_once = all(
        r["done"] == 1 for r in sequential + [r for c in concurrent for r in c[0]]
    )
    equal = sum(
        a["text"] == b["text"]
        for together, _ in concurrent
        for a, b in zip(sequential, together, strict=True)
    )
    rows = [summary("one at a time", sequential, seq_time)] + [
        summary(f"{clients} concurrent clients", together, seconds)
        for clients, (together, seconds) in zip(args.clients, concurrent, strict=True)
    ]
    if structured is not None:
        rows.append(summary(
            f"{max(args.clients)} concurrent clients, json_schema", *structured
        ))  # fmt: skip
    print(f"\nload (1-min average): {load_at_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print(
        f"server: --max-batch {args.max_batch} --max-context {args.max_context} "
        f"--steps-per-call {args.steps_per_call}; {len(contents)} greedy chat "
        f"requests of at most {args.max_tokens} tokens; exit code {code}"
    )
    print("\n| requests sent | req/s | tokens/s | TTFT p50 | TTFT p95 | "
          "per token p50 | per token p95 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['name']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
            f"{r['ttft_p50']:.2f} s | {r['ttft_p95']:.2f} s | "
            f"{1000 * r['token_p50']:.0f} ms | {1000 * r['token_p95']:.0f} ms |"
        )
    for row in rows[1:]:
        speedup = row["tokens_per_s"] / rows[0]["tokens_per_s"]
        print(f"\n{row['name']}: aggregate tokens/s {speedup:.2f}x sequential")
    expected = len(contents) * len(concurrent)
    print(f"every request answered exactly once: {answered_once}; concurrent "
          f"answers equal to sequential: {equal}/{expected}")  # fmt: skip
    valid = True
    if structured is not None:
        ended = [r for r in structured[0] if r["finish"] == "stop"]
        valid = all(r["done"] == 1 for r in structured[0]) and all(
            _validates(r["text"]) for r in ended
        )
        print(f"json_schema answers: {len(ended)} of {len(structured[0])} "
              f"ended, every ended one validates: {valid}")  # fmt: skip
    if not answered_once or equal != expected or code != 0 or not valid:
        raise SystemExit(1)


def _validates(text):
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


if __name__ == "__main__":
    main()
