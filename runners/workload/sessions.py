"""Multi-turn sessions (issue 31): a conversation of a ShareGPT-format dataset sent turn by turn.

Turn n's prompt is the conversation so far: the user's messages and the dataset's own replies up
to the user's n-th message, so lengths stay the dataset's; its target output is the dataset's
n-th reply. A turn is sent when the previous turn's last token has arrived plus a think time
(:class:`ThinkTime`), so a session is a closed loop: a slow server delays its later turns, as it
delays a person. Latency counts from that moment (the turn's ``arrival_s``), never from when the
scheduler sends it. First turns arrive by the run's arrival process; ``workload.requests`` counts
sessions. A session stops before the first turn whose prompt plus reply does not fit the context
(:attr:`MultiTurnConfig.context_tokens`, and a real server's own limit), and after
``max_turns``; both are counted in the run's report.

What the server's prefix cache can reuse: turn n's prompt starts with turn n-1's prompt, then the
dataset's reply to it (not what the engine generated, which schedlab never sends back: the
engine's cached output blocks do not match it), so turn n can hit turn n-1's prompt blocks. In
:mod:`runners.workload.prefix` terms each message is one segment, keyed by the conversation and
the message's index (:func:`message_content`).

This module holds the settings and the reading of conversations (no numpy at import: a config
loads quickly); :mod:`runners.workload.session_workload` builds the requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from runners.input_model import InputModel
from runners.workload.conversations import (
    SYNTHETIC_SESSION_FILES,
    DatasetSource,
    LengthFilter,
    LoadReport,
    conversation_turns,
    nothing_usable,
    source_entries,
)
from runners.workload.tokens import TokenCounter

#: Most turns a session may have (:attr:`MultiTurnConfig.max_turns`).
MAX_TURNS = 1000
#: Content ids of session messages (runners.workload.prefix segments): this plus
#: (conversation key x :data:`MESSAGES_PER_CONVERSATION`) plus the message's index.
SESSION_CONTENT = 1 << 45
#: Room for one conversation's messages in the content ids (two per turn).
MESSAGES_PER_CONVERSATION = 2 * MAX_TURNS + 2
#: The text between two messages of a prompt.
MESSAGE_SEPARATOR = "\n"


class ThinkTime(InputModel):
    """Seconds a user waits between a reply and their next message: ``exponential`` with mean
    ``mean_s`` (the default, 5 s: our assumption, no public trace gives ShareGPT users' timing),
    or ``constant``; ``mean_s`` 0 sends the next turn at once (back to back)."""

    distribution: Literal["exponential", "constant"] = "exponential"
    mean_s: float = Field(default=5.0, ge=0, le=86_400, description="mean think time, seconds")


class MultiTurnConfig(InputModel):
    """Send whole conversations, turn by turn (module docstring); ``workload.requests`` then
    counts sessions."""

    max_turns: int = Field(default=8, ge=1, le=MAX_TURNS, description="most turns sent per session")
    think_time: ThinkTime = Field(default_factory=ThinkTime)
    context_tokens: int = Field(
        default=4096,
        ge=2,
        le=10_000_000,
        description="tokens a turn's prompt plus reply may take; a session stops before the first turn over it "
        "(a real server's own context applies too, the smaller wins)",
    )

    def label(self) -> str:
        think = self.think_time
        kind = "exp" if think.distribution == "exponential" else "const"
        return f"sessions <={self.max_turns} turns, think {kind} {think.mean_s:g}s"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation of a dataset: its messages in order (user, reply, user, reply, ...; always
    an even number) with their token counts, and ``key``, its position among the conversations
    read (content ids: :func:`message_content`)."""

    key: int
    texts: tuple[str, ...]
    tokens: tuple[int, ...]

    @property
    def turns(self) -> int:
        return len(self.texts) // 2

    def prompt_tokens(self, turn: int) -> int:
        """Tokens of turn ``turn``'s prompt (from 1): every message before its reply."""
        return sum(self.tokens[: 2 * turn - 1])

    def reply_tokens(self, turn: int) -> int:
        return self.tokens[2 * turn - 1]


def message_content(task_key: int, conversation: int, message: int) -> int:
    """The content id of message ``message`` (from 0) of conversation ``conversation`` of the task
    numbered ``task_key``: the same message of the same conversation is the same content in every
    session that sends it, so two sessions drawn from one conversation share it, as they would on
    a real engine."""
    return SESSION_CONTENT + ((task_key << 32) + conversation) * MESSAGES_PER_CONVERSATION + message


def extract_conversations(
    entries: Iterable[Any], counter: TokenCounter, length_filter: LengthFilter, source: str, max_turns: int
) -> tuple[list[Conversation], LoadReport]:
    """The conversations whose first exchange passes ``length_filter`` (the same conversations a
    single-turn run keeps, skipped ones counted by reason as there), each with its later exchanges
    up to ``max_turns`` turns: every (user message, reply) pair that follows in order, up to the
    first break (a missing reply, two user messages in a row, a non-text value). Later turns are
    not filtered here: the context limit stops a session (the builder counts it)."""
    report = LoadReport(source=source, tokenizer=counter.name)
    kept: list[list[str]] = []
    for entry in entries:
        report.entries += 1
        turns = conversation_turns(entry, max_turns)
        if isinstance(turns, str):
            report.skipped[turns] += 1
            continue
        kept.append([text for exchange in turns for text in exchange])
    counts = counter.count([text for texts in kept for text in texts])
    conversations: list[Conversation] = []
    position = 0
    for texts in kept:
        tokens = tuple(counts[position : position + len(texts)])
        position += len(texts)
        reason = length_filter.rejects(tokens[0], tokens[1])
        if reason is not None:
            report.skipped[reason] += 1
            continue
        conversations.append(Conversation(len(conversations), tuple(texts), tokens))
    report.kept = len(conversations)
    return conversations, report


def load_conversations(
    source: DatasetSource, task: str, counter: TokenCounter, length_filter: LengthFilter, max_turns: int
) -> tuple[list[Conversation], LoadReport]:
    """One task's conversations (:func:`extract_conversations`) from its source: for ``synthetic``
    the multi-turn stand-in (:data:`SYNTHETIC_SESSION_FILES`); DatasetError when none is usable."""
    label, entries = source_entries(source, task, SYNTHETIC_SESSION_FILES)
    conversations, report = extract_conversations(entries, counter, length_filter, label, max_turns)
    if not conversations:
        raise nothing_usable(label, report)
    return conversations, report


def turns_that_fit(conversation: Conversation, max_turns: int, limit_tokens: int, extra_tokens: int = 0) -> int:
    """How many of the conversation's first turns are sent: up to ``max_turns``, stopping before
    the first turn whose prompt (plus ``extra_tokens``: a system prompt, the server's own
    additions) and reply exceed ``limit_tokens``. At least 1: the first turn passed the filters
    already (which include the server's context)."""
    sent = 1
    for turn in range(2, min(max_turns, conversation.turns) + 1):
        if conversation.prompt_tokens(turn) + extra_tokens + conversation.reply_tokens(turn) > limit_tokens:
            break
        sent = turn
    return sent


def session_prompt(conversation: Conversation, turn: int) -> str:
    """Turn ``turn``'s prompt text: the conversation's messages before its reply, one
    :data:`MESSAGE_SEPARATOR` between two, so turn n's prompt starts with turn n-1's."""
    return MESSAGE_SEPARATOR.join(conversation.texts[: 2 * turn - 1])


def session_segments(
    conversation: Conversation, task_key: int, turn: int, prefix: Sequence[tuple[int, int]] = ()
) -> tuple[tuple[int, int], ...]:
    """Turn ``turn``'s segments: ``prefix`` (a shared system prompt's), then one per message before
    its reply (:func:`message_content`)."""
    return (
        *prefix,
        *(
            (message_content(task_key, conversation.key, index), conversation.tokens[index])
            for index in range(2 * turn - 1)
        ),
    )
