"""`keras-tfm serve --prefill-chunk`: what a long prompt does to the
answers streaming beside it, prefilled at once or in chunks.

For each `--prefill-chunk` setting, starts `keras-tfm serve MODEL` (prefix
cache off, so every prompt is prefilled whole) on a free 127.0.0.1 port,
starts `--streams` greedy chat answers of `--max-tokens` tokens, and once
they stream sends one request whose prompt is ~1,000 tokens (the rules of
`serve_prefix_cache.py`, twice). Measures on the client the gaps between
the streaming answers' tokens while the long prompt is prefilled (its
send to its first token), the largest gap overall, and the long request's
time to first token. Prints a Markdown table and checks that the answers
are the same in every setting. Bounded: loopback only, streams + 1
requests per setting, a timeout on every call.

    python benchmarks/serve_chunked_prefill.py --prefill-chunk 0 256 128
"""

import argparse
import os
import signal
import statistics
import threading
import time

import openai
from serve_prefix_cache import system_prompt

from keras_tfm.serving.process import free_port, start_server

QUESTIONS = ["Tell me about the sea.", "Describe a forest.", "Talk about trains."]


def stream(client, model, messages, max_tokens, times, texts):
    """One streamed greedy answer: each text chunk's arrival time."""
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0,
        stream=True,
    ):  # fmt: skip
        for choice in chunk.choices:
            if choice.delta.content:
                times.append(time.perf_counter())
                texts.append(choice.delta.content)


def measure(args, chunk):
    port = free_port()
    server = start_server(
        args.model, port, "--max-batch", len(QUESTIONS[: args.streams]) + 1,
        "--max-context", args.max_context, "--prefix-cache-mb", 0,
        "--prefill-chunk", chunk,
    )  # fmt: skip
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
        timeout=600,
    )  # fmt: skip
    long = [{"role": "system", "content": system_prompt(0) + "\n" + system_prompt(1)},
            {"role": "user", "content": "Which rule matters most?"}]  # fmt: skip
    try:
        # Warm-up: the long prompt's prefill (or its chunks) compiled.
        stream(client, args.model, long, 2, [], [])
        times = [[] for _ in QUESTIONS[: args.streams]]
        texts = [[] for _ in QUESTIONS[: args.streams]]
        threads = [
            threading.Thread(
                target=stream,
                args=(client, args.model, [{"role": "user", "content": q}],
                      args.max_tokens, t, x),
            )  # fmt: skip
            for q, t, x in zip(QUESTIONS, times, texts, strict=False)
        ]
        for thread in threads:
            thread.start()
        while min(len(t) for t in times) < 8:  # every answer streams
            time.sleep(0.01)
        sent = time.perf_counter()
        first = []
        stream(client, args.model, long, 1, first, [])
        for thread in threads:
            thread.join()
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(120)
    gaps = [b - a for t in times for a, b in zip(t, t[1:], strict=False)]
    during = [
        b - a for t in times for a, b in zip(t, t[1:], strict=False)
        if b > sent and a < first[0]
    ]  # fmt: skip
    return dict(
        chunk=chunk, ttft=first[0] - sent, during=max(during, default=0.0),
        largest=max(gaps), median=statistics.median(gaps), code=code,
        texts=["".join(x) for x in texts],
    )  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2_135m_instruct")
    parser.add_argument("--prefill-chunk", type=int, nargs="+", default=[0, 256])
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-context", type=int, default=1536)
    args = parser.parse_args()
    rows = [measure(args, chunk) for chunk in args.prefill_chunk]
    print(f"\nload (1-min average) at the end: {os.getloadavg()[0]:.1f}; "
          f"{os.cpu_count()} cores")  # fmt: skip
    print(f"{args.model}: {args.streams} greedy answers of {args.max_tokens} "
          f"tokens streaming, then a ~1,000-token prompt; exit codes "
          f"{[r['code'] for r in rows]}\n")  # fmt: skip
    print("| --prefill-chunk | long prompt's TTFT | largest gap while it "
          "prefills | largest gap | median gap |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        gaps = (1000 * r[k] for k in ("during", "largest", "median"))
        print(f"| {r['chunk']} | {r['ttft']:.2f} s | " + " | ".join(
            f"{gap:.0f} ms" for gap in gaps) + " |")  # fmt: skip
    equal = all(r["texts"] == rows[0]["texts"] for r in rows)
    print(f"\nthe streamed answers are the same in every setting: {equal}")
    if not equal or any(r["code"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
