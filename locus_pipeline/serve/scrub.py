"""What an upstream sends, cleaned before it is relayed, logged or stored: credentials (a key, a bearer token,
key-shaped strings) scrubbed from error texts, the known secrets from every answer, JSON parsed within a depth."""

from __future__ import annotations

import base64
import json
import re
from typing import Sequence

_CREDENTIAL = re.compile(
    r"(?i)(bearer\s+|(?:authorization|api[_-]?key|x-api-key|access[_-]?token)[\"']?\s*[:=]\s*[\"']?"
    r"(?:bearer\s+)?)([^\s\"',;}]+)"
)
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}")
PARTIAL = 6  # any run of this many characters of a known secret is redacted (a key cut short, split, in pieces)
MAX_JSON_DEPTH = 64  # an upstream's JSON nested deeper is treated as not JSON
# characters that show nothing: format characters (zero-width spaces and joiners, bidi marks, the BOM, tags),
# variation selectors, the combining grapheme joiner and Hangul fillers; removed before secrets are looked for
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e0fff]"
)
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _unescape(match: re.Match) -> str:
    code = int(match.group(1), 16)
    return match.group(0) if 0xD800 <= code <= 0xDFFF else chr(code)  # a surrogate half stays as written


def secret_forms(secret: str) -> list[str]:
    """The strings an upstream may echo ``secret`` as: itself and its base64 encodings (standard and URL-safe) at
    each of the three byte alignments (the characters that depend on the secret's bytes only), so that a key
    inside a base64-encoded blob is found too."""
    raw, forms = secret.encode("utf-8"), [secret]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii")
        core = encoded[(shift * 8 + 5) // 6 : ((shift + len(raw)) * 8) // 6]  # the characters of the secret alone
        forms += [core, core.replace("+", "-").replace("/", "_")]
    return list(dict.fromkeys(f for f in forms if f))


def _redact_known(text: str, forms: Sequence[str]) -> str:
    """``text`` with every run of PARTIAL-character pieces of any of ``forms`` replaced: the whole secret, its
    first or last characters where a body was cut, the pieces where it was split. One pass over ``text`` with a
    set lookup per position (linear in the text, whatever the secrets)."""
    short = [f for f in forms if len(f) < PARTIAL]
    for form in short:
        text = text.replace(form, "[redacted]")
    windows = {f[i : i + PARTIAL] for f in forms if len(f) >= PARTIAL for i in range(len(f) - PARTIAL + 1)}
    runs: list[list[int]] = []
    for start in range(len(text) - PARTIAL + 1):
        if text[start : start + PARTIAL] in windows:
            if runs and start <= runs[-1][1]:  # overlapping windows merge into one run
                runs[-1][1] = start + PARTIAL
            else:
                runs.append([start, start + PARTIAL])
    if not runs:
        return text
    pieces, end = [], 0
    for start, stop in runs:
        pieces += [text[end:start], "[redacted]"]
        end = stop
    return "".join(pieces) + text[end:]


def scrub_credentials(text: str, known: Sequence[str] = (), *, patterns: bool = True) -> str:
    """``text`` (an upstream's error body, an exception) with credentials replaced by ``[redacted]``: the ``known``
    secrets wherever they appear (whole, cut short, split or in pieces: any PARTIAL characters of one; also
    base64-encoded, written as ``\\uXXXX`` escapes, or with invisible characters between its characters, which
    are removed and decoded first), Authorization / api-key values and key-shaped strings (``sk-...``), so that an
    upstream echoing the request's headers never puts a key into a 502 body or the log. Scrub what the client or
    the log will read: after every decoding (:func:`scrub_body`) and before any cut; linear in ``text``, which
    callers bound (an error body's prefix).

    ``patterns=False`` (an answer's text, which may rightly hold ``api_key = ...`` in code it writes): the known
    secrets only, and the text comes back as it was (invisible characters, escapes) unless one was found."""
    secrets_known = [s for s in known if s]
    if secrets_known:
        seen = _ESCAPE.sub(_unescape, _INVISIBLE.sub("", text))
        redacted = _redact_known(seen, [f for s in secrets_known for f in secret_forms(s)])
        if patterns or redacted != seen:
            text = redacted
    if not patterns:
        return text
    text = _CREDENTIAL.sub(lambda m: m.group(1) + "[redacted]", text)
    return _KEY_SHAPED.sub("[redacted]", text)


def _scrub_value(value: object, known: Sequence[str], patterns: bool = True) -> object:
    if isinstance(value, str):
        return scrub_credentials(value, known, patterns=patterns)
    if isinstance(value, list):
        return [_scrub_value(v, known, patterns) for v in value]
    if isinstance(value, dict):
        return {
            scrub_credentials(str(k), known, patterns=patterns): _scrub_value(v, known, patterns)
            for k, v in value.items()
        }
    return value


def scrub_answer(data: object, known: Sequence[str]) -> object:
    """An upstream's usable answer (parsed JSON, any status) with the known secrets (its key, the gateway's token)
    scrubbed from every string: what the client, the live answer log and MLflow get. Only the known secrets: an
    answer may rightly hold key-shaped text (code it writes), which the error bodies' patterns would redact."""
    return _scrub_value(data, [k for k in known if k], False) if any(known) else data


def scrub_body(raw: bytes, known: Sequence[str] = ()) -> tuple[object | None, str]:
    """An upstream's body, decoded as far as it goes and scrubbed after each step: (the JSON value with every
    string scrubbed, or None when not JSON; the scrubbed text). A key written as ``\\uXXXX`` escapes is plain
    text once parsed, and is scrubbed there."""
    text = scrub_credentials(raw.decode("utf-8", "replace"), known)
    data = json_or_none(raw)
    if data is None:
        return None, text
    data = _scrub_value(data, known)
    return data, json.dumps(data, ensure_ascii=False)


def is_event_line(line: str) -> bool:
    """Whether ``line`` is a line of a server-sent event stream whose data is JSON (or ``[DONE]``)."""
    if line.startswith((":", "event:", "id:", "retry:")):
        return True
    if not line.startswith("data:"):
        return False
    data = line[5:].strip()
    try:
        return data == "[DONE]" or isinstance(json.loads(data), (dict, list))
    except ValueError:
        return False


def json_or_none(raw: bytes) -> object | None:
    """``raw`` parsed as JSON, or None when it is not JSON or nests deeper than MAX_JSON_DEPTH (what the gateway
    re-serialises stays far from Python's recursion limit)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if _depth(data) <= MAX_JSON_DEPTH else None


def _depth(value: object) -> int:
    """How deep ``value`` nests (iterative; stops counting past MAX_JSON_DEPTH)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


__all__ = [
    "MAX_JSON_DEPTH",
    "is_event_line",
    "json_or_none",
    "scrub_answer",
    "scrub_body",
    "scrub_credentials",
    "secret_forms",
]
