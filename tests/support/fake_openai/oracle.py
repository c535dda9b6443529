"""The text and the prompt bill of the fake's answers, for tests to compare against."""

from __future__ import annotations

from tests.support.fake_openai.replies import MARKER


def words_of(prompt: str) -> list[str]:
    """The words the fake's answer is made of: the prompt's, markers removed."""
    return MARKER.sub(" ", prompt).split() or ["token"]


def token_text(prompt: str, index: int) -> str:
    words = words_of(prompt)
    word = words[index % len(words)]
    return word if index == 0 else " " + word


def expected_text(prompt: str, tokens: int) -> str:
    """The text of a complete answer of `tokens` tokens to `prompt`."""
    return "".join(token_text(prompt, i) for i in range(tokens))


def prompt_tokens(prompt: str) -> int:
    """What the fake bills for a prompt: one token per whitespace-separated word (at least 1)."""
    return max(1, len(prompt.split()))
