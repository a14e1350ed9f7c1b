"""Names and reasons as a tick message shows them: one line each, whatever a dropper put in a file name."""

from __future__ import annotations


def printable(text: str | None) -> str:
    """``text`` with every character that is not printable (a newline, a tab, a control or format character, a lone
    surrogate) written as its escape (``\\n``, ``\\u202e``): a name can neither start a line nor hide a part of one."""
    text = "" if text is None else str(text)
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in text
    )
