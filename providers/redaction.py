"""Scrubbing an API key out of everything an adapter hands back, in every form a server may echo it in.

Providers echo the key they were sent: OpenAI's "Incorrect API key provided: sk-...", a proxy's debug
header, a gateway that puts the decoded ``Authorization`` header into its error. The key can come back

* plain;
* JSON-escaped, wholly or in part (``\\u0073k-...``, ``\\/`` for ``/``). ``json.loads`` turns these back
  into the key, which is why text redacted *before* decoding is not enough: decoded values are scrubbed too;
* URL-encoded, wholly or in part (``sk-a%2Fb``);
* base64, standard or URL-safe alphabet, at any byte offset inside a larger blob (a Basic credential);
* hex.

``Redactor.text`` replaces each occurrence with ``[redacted]`` (a base64 or hex occurrence takes its whole
encoded token with it, since the token's edges carry bits of the key too). ``Redactor.value`` walks decoded
JSON and scrubs every string and every object key. Keys shorter than ``MIN_SECRET_CHARS`` are placeholders
("x", "none" for local servers), not secrets: scrubbing them would mangle every word that contains them.

``scrub_library_logs`` keeps the key out of the HTTP libraries' DEBUG logs, where httpcore writes every
response header: a filter on their loggers runs each record through every live adapter's redactor.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import weakref
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8

# The loggers httpx and httpcore write through. Filters on a logger only see the records it creates
# (not its children's), so each is named.
LIBRARY_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)

_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-=")
_HEX_CHARS = frozenset("0123456789abcdefABCDEF")


def _hex_any_case(digits: str) -> str:
    return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in digits)


def _json_escapes(char: str) -> list[str]:
    """Regexes for the JSON escapes that decode to ``char`` (``\\uXXXX`` in any case, short forms)."""
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair
        code -= 0x10000
        units: tuple[int, ...] = (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    else:
        units = (code,)
    forms = ["".join(r"\\u" + _hex_any_case(f"{unit:04x}") for unit in units)]
    short = {"/": r"\\/", '"': r'\\"', "\\": r"\\\\"}.get(char)
    if short:
        forms.append(short)
    return forms


def _percent_escape(char: str) -> str:
    return "".join("%" + _hex_any_case(f"{byte:02x}") for byte in char.encode("utf-8"))


def char_forms_pattern(secret: str) -> str:
    """A regex matching ``secret`` with each character plain, JSON-escaped or percent-encoded.

    Per character, so a partly escaped echo (``sk\\u002dab%63...``) matches as well as a wholly escaped one.
    """
    parts = []
    for char in secret:
        forms = [re.escape(char), *_json_escapes(char), _percent_escape(char)]
        parts.append("(?:" + "|".join(forms) + ")")
    return "".join(parts)


def base64_cores(secret: bytes) -> set[str]:
    """The base64 characters that depend on ``secret``'s bytes alone, at each of the three byte offsets.

    An encoder that meets the key at byte offset ``r`` (mod 3) inside a larger blob writes these characters
    whatever comes before or after it; the characters at the edges mix in neighbouring bytes, so they are
    left out here (and taken away with the whole token when a core is found).
    """
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + secret).decode("ascii")
        first = -(-8 * offset // 6)  # the first character with no bits of the padding bytes
        end = 8 * (offset + len(secret)) // 6  # characters past this mix in the bytes after the key
        core = encoded[first:end]
        if core:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))  # the URL-safe alphabet
    return cores


class Redactor:
    """Replaces one secret, in every covered encoding, with ``[redacted]``. A no-op for short or no keys."""

    def __init__(self, secret: str | None) -> None:
        self.active = bool(secret) and len(secret or "") >= MIN_SECRET_CHARS
        self._plain = secret or ""
        if not self.active:
            return
        raw = self._plain.encode("utf-8")
        self._chars = re.compile(char_forms_pattern(self._plain))
        # Literal needles only: a pattern like "[A-Z...]*core" would backtrack quadratically over a long
        # encoded run (an inline image) that holds no core. The token around a needle is found by hand.
        cores = sorted(base64_cores(raw), key=len, reverse=True)
        self._base64 = re.compile("|".join(map(re.escape, cores)))
        self._hex = re.compile(raw.hex(), re.IGNORECASE)

    def __repr__(self) -> str:  # never the key
        return f"Redactor(active={self.active})"

    def text(self, text: str) -> str:
        """``text`` with every covered form of the secret replaced by ``[redacted]``."""
        if not self.active or not text:
            return text
        text = self._chars.sub(REDACTED, text)
        text = _redact_tokens(text, self._base64, _BASE64_CHARS)
        return _redact_tokens(text, self._hex, _HEX_CHARS)

    def value(self, value: Any) -> Any:
        """Decoded JSON with every string and every object key scrubbed. Other values pass as they are."""
        if not self.active:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {(self.text(k) if isinstance(k, str) else k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value


def _redact_tokens(text: str, needle: re.Pattern[str], alphabet: frozenset[str]) -> str:
    """``text`` with each whole run of ``alphabet`` characters that holds a ``needle`` match redacted.

    Linear: runs are walked outwards from each match once, and a later match inside a taken run is skipped.
    """
    pieces: list[str] = []
    done = 0  # text[:done] is already in pieces
    for match in needle.finditer(text):
        if match.start() < done:
            continue
        start, end = match.start(), match.end()
        while start > done and text[start - 1] in alphabet:
            start -= 1
        while end < len(text) and text[end] in alphabet:
            end += 1
        pieces += (text[done:start], REDACTED)
        done = end
    return text if not pieces else "".join(pieces) + text[done:]


class _LibraryLogScrubber(logging.Filter):
    """Runs each record of the HTTP libraries' loggers through every live adapter's redactor."""

    def __init__(self) -> None:
        super().__init__()
        self.redactors: weakref.WeakSet[Redactor] = weakref.WeakSet()
        self.lock = threading.Lock()  # adapters may be built on one thread while another logs

    def add(self, redactor: Redactor) -> None:
        with self.lock:
            self.redactors.add(redactor)

    def filter(self, record: logging.LogRecord) -> bool:
        with self.lock:
            redactors = list(self.redactors)
        if not redactors:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record: the handler reports it, a filter must not raise
            return True
        clean = message
        for redactor in redactors:
            clean = redactor.text(clean)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_SCRUBBER = _LibraryLogScrubber()


def scrub_library_logs(redactor: Redactor) -> None:
    """Keep ``redactor``'s secret out of httpx/httpcore log records for as long as the redactor lives."""
    if not redactor.active:
        return
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _SCRUBBER not in logger.filters:
            logger.addFilter(_SCRUBBER)
    _SCRUBBER.add(redactor)
