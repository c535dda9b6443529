"""What reading a chat completion stream costs the worker, per token, by each way the openai
provider could read it:

    httpx       the hand-written httpx client the provider had before the official SDK: its
                lines (aiter_lines), our SSE decoder, orjson;
    sdk_typed   the SDK's typed stream: every chunk a ChatCompletionChunk model;
    sdk_raw     the SDK makes the request (auth, headers, status errors) and we read the body's
                lines (httpx2's aiter_lines), parsed with orjson;
    sdk_bytes   as sdk_raw, but the body's bytes split into SSE events by us (aiter_bytes);
    provider    worker/providers/openai.py end to end, which reads as sdk_bytes does;
    provider_file  with BENCH_PROVIDER_FILE=path, the provider of that file (an earlier
                version: 259e356's is the httpx client before the SDK), the figures' baseline.

    .venv/bin/python -m bench.openai_sdk_paths [--streams 300] [--tokens 200] [--repeats 3]

The fake OpenAI server (tests/support/fake_openai) runs in processes of its own (`--fakes`, 2);
each measurement is a fresh client process that opens `--streams` concurrent streams of
`--tokens` tokens each, paced at `--token-delay-s` (0.02 s: 50 tokens/s, a model's pace, so each
chunk arrives on its own as it would in production), on uvloop as the worker runs. The client's
CPU (user + system, getrusage) over the streaming alone, divided by the tokens read, is the
figure, and a token's share of each stream's request is in it; tokens/s a core is the throughput
it implies (1 / CPU a token). The paths are interleaved within each repeat; min / median / max
over the repeats. Each reader does the provider's per-token work: a deadline around every read,
SSE decoding, the chunk's checks, two generator layers out to the consumer. Printed, never
asserted (docs/architecture.md, "The providers on their SDKs", has the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import aclosing
from typing import Any, Final

import httpx
import httpx2
import openai
import orjson
import structlog
import uvloop

from jobstream.settings import Settings
from jobstream.worker.providers.base import ProviderRequest, TextDelta
from jobstream.worker.providers.openai import OpenAIProvider
from tests.support.fake_openai import Reply

PATHS: Final = ("httpx", "sdk_typed", "sdk_raw", "sdk_bytes", "provider")
PROVIDER_FILE: Final = "BENCH_PROVIDER_FILE"
KEY: Final = "sk-bench"
IDLE_S: Final = 600.0  # never the limit: a slow path is measured, not failed
CONNECT_S: Final = 60.0  # hundreds of connections opened at once on a busy machine
MODEL: Final = "bench-model"


async def _httpx_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """The pre-SDK provider's loop: httpx, aiter_lines, an SSE decoder, orjson."""
    # The SDK's pool limits (1,000 connections), so that only the per-token work differs.
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    timeout = httpx.Timeout(CONNECT_S, read=None)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def one(prompt: str) -> int:
            return await _count(_httpx_stream(client, base_url, prompt, tokens))

        return sum(await asyncio.gather(*(one(p) for p in prompts)))


async def _httpx_stream(
    client: httpx.AsyncClient, base_url: str, prompt: str, tokens: int
) -> AsyncGenerator[str, None]:
    async def trace(event: str, info: dict[str, Any]) -> None:
        pass

    request = client.build_request(
        "POST",
        base_url + "/chat/completions",
        content=orjson.dumps(_body(prompt, tokens)),
        headers={
            "content-type": "application/json",
            "accept": "text/event-stream",
            "authorization": f"Bearer {KEY}",
        },
        extensions={"trace": trace},
    )
    response = await client.send(request, stream=True)
    try:
        async with aclosing(_lines_to_text(response.aiter_lines())) as texts:  # type: ignore[arg-type]
            async for text in texts:
                yield text
    finally:
        await response.aclose()


async def _sdk_typed_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """The SDK's typed stream: a ChatCompletionChunk built for every chunk."""
    client = _sdk(base_url)
    try:

        async def one(prompt: str) -> int:
            return await _count(_sdk_typed_stream(client, prompt, tokens))

        return sum(await asyncio.gather(*(one(p) for p in prompts)))
    finally:
        await client.close()


async def _sdk_typed_stream(
    client: openai.AsyncOpenAI, prompt: str, tokens: int
) -> AsyncGenerator[str, None]:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    try:
        async with aclosing(_chunks_to_text(stream)) as texts:
            async for text in texts:
                yield text
    finally:
        await stream.close()


async def _chunks_to_text(stream: openai.AsyncStream[Any]) -> AsyncGenerator[str, None]:
    loop = asyncio.get_running_loop()
    iterator = stream.__aiter__()
    while True:
        try:
            async with asyncio.timeout_at(loop.time() + IDLE_S):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        if chunk.choices:
            delta = chunk.choices[0].delta
            if delta is not None and isinstance(delta.content, str) and delta.content:
                yield delta.content


async def _sdk_raw_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """The SDK sends and raises status errors; we read the raw lines and parse with orjson."""
    client = _sdk(base_url)
    try:

        async def one(prompt: str) -> int:
            return await _count(_sdk_raw_stream(client, prompt, tokens))

        return sum(await asyncio.gather(*(one(p) for p in prompts)))
    finally:
        await client.close()


async def _sdk_raw_stream(
    client: openai.AsyncOpenAI, prompt: str, tokens: int
) -> AsyncGenerator[str, None]:
    async with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        lines = response.http_response.aiter_lines()
        async with aclosing(_lines_to_text(lines)) as texts:  # type: ignore[arg-type]
            async for text in texts:
                yield text


async def _sdk_bytes_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """As sdk_raw, but the body's bytes split into lines by us, each parsed as bytes."""
    client = _sdk(base_url)
    try:

        async def one(prompt: str) -> int:
            return await _count(_sdk_bytes_stream(client, prompt, tokens))

        return sum(await asyncio.gather(*(one(p) for p in prompts)))
    finally:
        await client.close()


async def _sdk_bytes_stream(
    client: openai.AsyncOpenAI, prompt: str, tokens: int
) -> AsyncGenerator[str, None]:
    async with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        pieces = response.http_response.aiter_bytes()
        async with aclosing(_bytes_to_text(pieces)) as texts:
            async for text in texts:
                yield text


async def _bytes_to_text(pieces: AsyncGenerator[bytes, None]) -> AsyncGenerator[str, None]:
    loop = asyncio.get_running_loop()
    data: list[bytes] = []
    rest = b""
    try:
        while True:
            try:
                async with asyncio.timeout_at(loop.time() + IDLE_S):
                    piece = await anext(pieces)
            except StopAsyncIteration:
                return
            lines = (rest + piece).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                line = raw.removesuffix(b"\r")
                if line.startswith(b"data:"):
                    data.append(line[5:].removeprefix(b" "))
                    continue
                if line or not data:
                    continue
                payload = b"\n".join(data)
                data.clear()
                if payload == b"[DONE]":
                    return
                chunk = orjson.loads(payload)
                if not isinstance(chunk, dict) or "error" in chunk:
                    raise RuntimeError("not a chunk")
                choices = chunk.get("choices")
                if choices and isinstance(choices, list) and isinstance(choices[0], dict):
                    delta = choices[0].get("delta")
                    if isinstance(delta, dict):
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            yield content
    finally:
        await pieces.aclose()


async def _lines_to_text(lines: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
    loop = asyncio.get_running_loop()
    data: list[str] = []
    try:
        while True:
            try:
                async with asyncio.timeout_at(loop.time() + IDLE_S):
                    line = await anext(lines)
            except StopAsyncIteration:
                return
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line or not data:
                continue
            payload = "\n".join(data)
            data.clear()
            if payload == "[DONE]":
                return
            chunk = orjson.loads(payload)
            if not isinstance(chunk, dict) or "error" in chunk:
                raise RuntimeError("not a chunk")
            choices = chunk.get("choices")
            if choices and isinstance(choices, list) and isinstance(choices[0], dict):
                delta = choices[0].get("delta")
                if isinstance(delta, dict):
                    content = delta.get("content")
                    if isinstance(content, str) and content:
                        yield content
    finally:
        await lines.aclose()


async def _provider_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """worker/providers/openai.py as the worker runs it."""
    async with OpenAIProvider(_settings(base_url)) as provider:
        return await _through(provider, prompts, tokens)


async def _provider_file_path(base_url: str, prompts: list[str], tokens: int) -> int:
    """Another version of the provider, from the file BENCH_PROVIDER_FILE names (e.g. the one
    before the SDK: `git show 259e356:worker/providers/openai.py > /tmp/openai_httpx.py`)."""
    spec = importlib.util.spec_from_file_location("bench_provider", os.environ[PROVIDER_FILE])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    made: Any = module.OpenAIProvider
    if "client" in inspect.signature(made).parameters:
        # The pre-SDK provider took an httpx client: given the SDK's pool limits, so that only
        # the per-token work differs (its own default, httpx's, capped it at 100 streams).
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        async with (
            httpx.AsyncClient(limits=limits) as client,
            made(_settings(base_url), client=client) as provider,
        ):
            return await _through(provider, prompts, tokens)
    async with made(_settings(base_url)) as provider:
        return await _through(provider, prompts, tokens)


def _settings(base_url: str) -> Settings:
    return Settings(
        openai_base_url=base_url,
        openai_api_key=KEY,
        openai_model=MODEL,
        openai_first_token_timeout_s=IDLE_S,
        openai_idle_timeout_s=IDLE_S,
        openai_connect_timeout_s=CONNECT_S,
    )


async def _through(provider: Any, prompts: list[str], tokens: int) -> int:
    async def one(prompt: str) -> int:
        request = ProviderRequest(prompt=prompt, model=None, max_tokens=tokens, attempt=1)
        count = 0
        async for item in provider.stream(request):
            count += isinstance(item, TextDelta)
        return count

    return sum(await asyncio.gather(*(one(p) for p in prompts)))


def _sdk(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=KEY,
        base_url=base_url,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(timeout=httpx2.Timeout(CONNECT_S, read=None)),
    )


async def _count(texts: AsyncGenerator[str, None]) -> int:
    count = 0
    async with aclosing(texts):
        async for _ in texts:
            count += 1
    return count


def _body(prompt: str, tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


Runner = Callable[[str, list[str], int], Coroutine[Any, Any, int]]
RUNNERS: Final[dict[str, Runner]] = {
    "httpx": _httpx_path,
    "sdk_typed": _sdk_typed_path,
    "sdk_raw": _sdk_raw_path,
    "sdk_bytes": _sdk_bytes_path,
    "provider": _provider_path,
    "provider_file": _provider_file_path,
}


def child(path: str, base_urls: list[str], streams: int, tokens: int, delay_s: float) -> None:
    """One measurement in this process: prints {"cpu_s", "wall_s", "tokens"}."""
    # As the worker logs: info and above (the provider's debug line a request is not printed).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    marker = Reply(tokens=tokens, token_delay_s=delay_s).marker()
    prompts = [f"alpha beta gamma {i} {marker}" for i in range(streams)]

    async def run() -> dict[str, float]:
        runner = RUNNERS[path]
        # A few warm-up streams: imports, the client, the connections' first use.
        await asyncio.gather(*(runner(u, prompts[:4], 4) for u in base_urls))
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        shares = [prompts[i :: len(base_urls)] for i in range(len(base_urls))]
        counts = await asyncio.gather(
            *(runner(u, share, tokens) for u, share in zip(base_urls, shares, strict=True))
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"cpu_s": cpu, "wall_s": wall, "tokens": float(sum(counts))}

    print(json.dumps(uvloop.run(run())), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--token-delay-s", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fakes", type=int, default=2, help="fake server processes")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--base-urls", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.base_urls.split(","), args.streams, args.tokens, args.token_delay_s)
        return
    paths = args.paths.split(",")
    if PROVIDER_FILE in os.environ and "provider_file" not in paths:
        paths.insert(0, "provider_file")
    fakes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_openai", "--api-key", KEY],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.fakes)
    ]
    try:
        base_urls = []
        for fake in fakes:
            assert fake.stdout is not None
            base_urls.append(json.loads(fake.stdout.readline())["base_url"])
        results: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
        for repeat in range(args.repeats):
            for path in paths:
                out = subprocess.run(
                    [sys.executable, "-m", "bench.openai_sdk_paths", "--child", path,
                     "--base-urls", ",".join(base_urls), "--streams", str(args.streams),
                     "--tokens", str(args.tokens), "--token-delay-s", str(args.token_delay_s)],
                    capture_output=True, text=True,
                )  # fmt: skip
                if out.returncode != 0:
                    raise RuntimeError(f"{path} failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                results[path].append(result)
                per = result["cpu_s"] / result["tokens"] * 1e6
                print(
                    f"repeat {repeat + 1} {path:10} {per:6.1f} µs CPU/token "
                    f"({result['tokens']:.0f} tokens, {result['wall_s']:.1f} s wall, "
                    f"load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        for fake in fakes:
            fake.terminate()
            fake.wait()
    _report(results, args)


def _report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.streams} concurrent streams x {args.tokens} tokens at {args.token_delay_s} s a "
        f"token; client CPU µs a token, min / median / max of {args.repeats}"
    )
    base = "provider_file" if "provider_file" in results else "httpx"
    baseline = statistics.median(r["cpu_s"] / r["tokens"] for r in results[base])
    for path, runs in results.items():
        per = sorted(r["cpu_s"] / r["tokens"] * 1e6 for r in runs)
        rate = sorted(r["tokens"] / r["cpu_s"] for r in runs)
        median = statistics.median(per)
        print(
            f"  {path:10} {per[0]:6.1f} / {median:6.1f} / {per[-1]:6.1f} µs   "
            f"{rate[0]:8.0f} / {statistics.median(rate):8.0f} / {rate[-1]:8.0f} tokens/s a core"
            f"   {baseline * 1e6 / median:4.2f}x {base}'s throughput"
        )


if __name__ == "__main__":
    main()
