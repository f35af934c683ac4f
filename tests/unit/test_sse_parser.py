"""The event-stream parser (runners/engines/sse.py) on the byte streams vLLM, SGLang and LMDeploy
send, cut into pieces at every byte, and on the framing the standard allows beyond them.

The streams are written out in each server's exact framing (read from their source):
vLLM's ``completion/serving.py`` yields ``f"data: {chunk.model_dump_json(exclude_unset=True)}\\n\\n"``
(compact JSON) and ends with ``"data: [DONE]\\n\\n"``; SGLang's ``serving_completions.py`` the same
with ``model_dump_json()`` (nulls kept); LMDeploy's ``endpoints/completions.py`` yields
``f'data: {json.dumps(chunk)}\\n\\n'`` (JSON with ", " and ": " separators).
"""

from __future__ import annotations

import json

import pytest

from runners.engines.sse import SSEEvent, SSEParser

VLLM = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
    b'"choices":[{"index":0,"text":" Hi","logprobs":null,"finish_reason":null}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
    b'"choices":[{"index":0,"text":"!","logprobs":null,"finish_reason":"length"}]}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
SGLANG = (
    b'data: {"id":"a1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    b'"text":"\xc3\xa9t\xc3\xa9","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n'
    b'data: {"id":"a1","object":"text_completion","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)
LMDEPLOY = (
    b'data: {"id": "7", "object": "text_completion", "created": 1, "model": "m", '
    b'"choices": [{"index": 0, "text": "ok"}], "usage": null}\n\n'
    b'data: {"id": "7", "object": "text_completion", "created": 1, "model": "m", "choices": [], '
    b'"usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1}}\n\n'
    b"data: [DONE]\n\n"
)


def parse(pieces: list[bytes]) -> list[SSEEvent]:
    """All events of a stream fed in ``pieces``, piece ``i`` arriving at time ``i`` s."""
    parser = SSEParser()
    events = []
    for at, piece in enumerate(pieces):
        events += parser.feed(piece, float(at))
    return events + parser.close(float(len(pieces)))


def splits(stream: bytes) -> list[list[bytes]]:
    """The stream whole, byte by byte, and cut in two at every position."""
    cuts = [[stream], [stream[i : i + 1] for i in range(len(stream))]]
    return cuts + [[stream[:i], stream[i:]] for i in range(1, len(stream))]


@pytest.mark.parametrize(
    ("stream", "texts", "completion_tokens"),
    [(VLLM, [" Hi", "!"], 2), (SGLANG, ["été"], 1), (LMDEPLOY, ["ok"], 1)],
    ids=["vllm", "sglang", "lmdeploy"],
)
def test_server_streams_give_their_chunks_then_done_however_they_are_cut(stream, texts, completion_tokens):
    for pieces in splits(stream):
        events = parse(pieces)
        assert [event.done for event in events] == [False] * (len(texts) + 1) + [True]
        chunks = [json.loads(event.data) for event in events[:-1]]
        assert [chunk["choices"][0]["text"] for chunk in chunks[:-1]] == texts
        assert chunks[-1]["usage"]["completion_tokens"] == completion_tokens


def test_event_time_is_when_its_data_line_arrived_not_its_blank_line():
    # piece 0 carries the data line, piece 1 the blank line after it
    parser = SSEParser()
    assert parser.feed(b'data: {"a":1}\n', 0.0) == [SSEEvent('{"a":1}', 0.0)]  # at once, not at the blank line
    assert parser.feed(b"\n", 1.0) == []
    assert parser.feed(b"data: [DONE]\n\n", 2.0) == [SSEEvent("[DONE]", 2.0)]


def test_data_line_split_mid_line_is_joined_before_parsing():
    events = parse([b"da", b'ta: {"choices":[{"te', b'xt":"x"}]}', b"\n", b"\n"])
    assert [event.data for event in events] == ['{"choices":[{"text":"x"}]}']
    assert events[0].received_at == 3.0  # the piece with the line end that completed the data line


def test_multibyte_character_split_across_pieces():
    text = "data: é\n\n".encode()
    cut = text.index(b"\xc3") + 1
    assert [event.data for event in parse([text[:cut], text[cut:]])] == ["é"]


def test_crlf_and_lone_cr_line_ends_also_when_the_crlf_is_split():
    assert [e.data for e in parse([b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"])] == ["a", "b", "c"]
    # a CR ending one piece and the LF starting the next are one line end, not a blank line
    events = parse([b"data: a\r", b"\ndata: b\r\n", b"\r\n"])
    assert [event.data for event in events] == ["a", "b"]


def test_comments_and_other_fields_are_not_events():
    stream = b": ping\n\nevent: message\nid: 4\nretry: 10\n\n:another\ndata: x\n\n"
    assert [event.data for event in parse([stream])] == ["x"]


def test_each_data_line_is_its_own_event_as_every_openai_server_sends_them():
    # not the WHATWG joining of data lines: one JSON chunk per line, blank lines or not
    assert [event.data for event in parse([b'data: {"a":\ndata: 1}\n\n'])] == ['{"a":', "1}"]
    assert [event.data for event in parse([b'data: {"a":1}\ndata: {"a":2}\ndata: [DONE]\n'])] == [
        '{"a":1}',
        '{"a":2}',
        "[DONE]",
    ]


def test_white_space_around_the_line_and_the_value_is_framing():
    events = parse([b"data:x\n\ndata:  y \n\n data: z\n\ndata\n\ndata:\n\n"])
    assert [event.data for event in events] == ["x", "y", "z", ""]


def test_a_stream_cut_after_a_data_line_keeps_that_chunk():
    parser = SSEParser()
    assert parser.feed(b'data: {"t":"x"}\n', 3.0) == [SSEEvent('{"t":"x"}', 3.0)]  # the blank line never comes


def test_byte_order_mark_only_at_the_start_is_dropped():
    assert [event.data for event in parse([b"\xef\xbb\xbfdata: a\n\n"])] == ["a"]


def test_done_is_the_data_done_only():
    events = parse([b'data: [DONE]\n\ndata:  [DONE] \n\ndata: [DONE\n\ndata: "[DONE]"\n\n'])
    assert [event.done for event in events] == [True, True, False, False]


def test_end_of_stream_delivers_an_event_without_its_blank_line_or_line_end():
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: [DONE]", 0.0) == [SSEEvent("1", 0.0)]
    assert parser.close(5.0) == [SSEEvent("[DONE]", 5.0)]
    assert parser.close(6.0) == []


def test_empty_pieces_change_nothing():
    assert [event.data for event in parse([b"data: a\r", b"", b"\n\n"])] == ["a"]
