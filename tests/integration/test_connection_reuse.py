"""A server closing an idle keep-alive connection just as a request is sent on it (the cause of
a request failing with "Server disconnected" on the real vLLM when a policy held requests
back): the client closes idle connections before the servers do, and a request a server
dropped unanswered is sent once more."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from runners.engines.openai_client import KEEPALIVE_S, Endpoint, client_connector, stream_request

STREAM = (
    "".join(
        f"data: {json.dumps(chunk)}\n\n"
        for chunk in (
            {"choices": [{"text": "a"}]},
            {"choices": [{"text": "b"}]},
            {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 1}},
        )
    )
    + "data: [DONE]\n\n"
)


async def serve(drop_first: int):
    """A raw HTTP server: it drops the first ``drop_first`` requests unanswered (reads them, then
    closes the connection, as a server whose keep-alive timer fired does), answers the rest."""
    seen = {"requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
            if not head:
                break
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            seen["requests"] += 1
            if seen["requests"] <= drop_first:
                writer.close()
                return
            body = STREAM.encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def request_against(drop_first: int):
    async def go():
        server, port, seen = await serve(drop_first)
        try:
            async with aiohttp.ClientSession(connector=client_connector()) as session:
                result = await stream_request(session, Endpoint(f"http://127.0.0.1:{port}", "m"), "hi", 2, timeout_s=10)
        finally:
            server.close()
            await server.wait_closed()
        return result, seen["requests"]

    return asyncio.run(go())


def test_a_request_dropped_unanswered_is_sent_once_more():
    result, requests = request_against(drop_first=1)
    assert result.error is None and result.output_tokens == 2 and result.text == "ab"
    assert requests == 2 and result.retried_after is not None and "disconnected" in result.retried_after.lower()


def test_it_is_sent_only_once_more():
    result, requests = request_against(drop_first=5)
    assert requests == 2
    assert result.error is not None and "disconnected" in result.error.lower()


def test_idle_connections_close_before_the_servers_keep_alive():
    # vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE and uvicorn's default are 5 s
    assert KEEPALIVE_S < 5

    async def keepalive():
        connector = client_connector()
        try:
            return connector._keepalive_timeout
        finally:
            await connector.close()

    assert asyncio.run(keepalive()) == KEEPALIVE_S
