"""Reading a streamed chat completion (`stream: true`, server-sent events) as it arrives.

`ReplyBuilder.add(chunk)` takes one parsed `data:` event and returns the token strings it brought, so a streamer
(`streaming.py`, `serving/plain_stream.py`) sees the upstream server's tokens as they decode; `response()` is the
reply a non-streamed request would have returned (message `content` / `reasoning`, `logprobs.content`,
`finish_reason`, `usage`, and a `routedvlm` record when the server adds one), so everything after the call reads it
exactly as before. Tokens are the `logprobs.content` token strings when the server sends logprobs (the HTTP side
asks for them), a `<|...|>` special token held back until another token follows (the stop token ending a reply,
which the server's text leaves out, is never handed on); without logprobs, each delta's text is one piece, a reasoning delta followed by a content delta
getting a `</think>` piece between them so the answer/reasoning split still finds the boundary.
"""
from __future__ import annotations

import json

from ..base import THINK_CLOSE


class ReplyBuilder:
    """Accumulates the chunks of one streamed chat completion (choice 0)."""

    def __init__(self):
        self.content, self.reasoning, self.entries = [], [], []
        self.finish, self.usage, self.extra = None, None, {}
        self.saw_content, self.saw_reasoning, self.closed, self.special = False, False, False, []

    def add(self, chunk: dict) -> list:
        """Fold one chunk in; the token strings it brought (possibly none)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("routedvlm"):
            self.extra["routedvlm"] = chunk["routedvlm"]
        tokens = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning") if delta.get("reasoning") is not None else delta.get("reasoning_content")
            content = delta.get("content")
            entries = (choice.get("logprobs") or {}).get("content") or []
            self.entries.extend(entries)
            if reasoning:
                self.saw_reasoning = True
                self.reasoning.append(reasoning)
            if content is not None:
                self.saw_content = self.saw_content or bool(content)
                self.content.append(content)
            if entries:
                tokens.extend(self._held(e["token"] for e in entries))
            else:
                tokens.extend(self._pieces(reasoning, content))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return tokens

    def _held(self, tokens) -> list:
        """`tokens`, a `<|...|>` special token held back until a later token follows it: the stop token that ends a
        reply is not in the server's text, and is never handed on."""
        out = []
        for token in tokens:
            if _special(token):
                self.special.append(token)
                continue
            out.extend(self.special)
            self.special = []
            out.append(token)
        return out

    def _pieces(self, reasoning, content) -> list:
        out = [reasoning] if reasoning else []
        if content:
            if self.saw_reasoning and not self.closed:
                out.append(THINK_CLOSE)
                self.closed = True
            out.append(content)
        return out

    def response(self) -> dict:
        """The reply in the shape of a non-streamed chat completion."""
        message = {"role": "assistant", "content": "".join(self.content) if self.saw_content else None}
        if self.saw_reasoning:
            message["reasoning"] = "".join(self.reasoning)
        choice = {"index": 0, "message": message, "finish_reason": self.finish,
                  "logprobs": {"content": self.entries} if self.entries else None}
        return {"object": "chat.completion", "choices": [choice], "usage": self.usage or {}, **self.extra}


def _special(token: str) -> bool:
    return token.startswith("<|") and token.endswith("|>")


def events(lines):
    """The parsed JSON payloads of the `data:` lines of an SSE body, up to `[DONE]`."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if data:
            yield json.loads(data)


__all__ = ["ReplyBuilder", "events"]
