"""A canary API key and the oracle that finds it in any encoding the redactor promises to cover.

``reveals`` decodes what it is given independently of the adapters' redactor: plain, JSON ``\\u``- and
``\\/``-escaped, URL-encoded, base64 at each offset (standard and URL-safe) and hex.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from urllib.parse import unquote

CANARY = "sk-canary/Q7f3+x9Z_2b4dE80"  # has "/" and "+" so \/ and %2F/%2B forms mean something


def _json_unescape(text: str) -> str:
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    return text.replace("\\/", "/").replace('\\"', '"')


def base64_decodings(text: str) -> Iterator[bytes]:
    for run in re.findall(r"[A-Za-z0-9+/_=-]{8,}", text):
        for skip in range(4):
            chunk = run[skip:].rstrip("=")
            chunk = chunk[:-1] if len(chunk) % 4 == 1 else chunk  # one spare char cannot be a byte
            chunk += "=" * (-len(chunk) % 4)
            for alt in (chunk, chunk.translate(str.maketrans("-_", "+/"))):
                try:
                    yield base64.b64decode(alt, validate=True)
                except (binascii.Error, ValueError):
                    pass


def _hex_decodings(text: str) -> Iterator[bytes]:
    for run in re.findall(r"[0-9a-fA-F]{16,}", text):
        for skip in range(2):
            chunk = run[skip:]
            yield bytes.fromhex(chunk[: len(chunk) - len(chunk) % 2])


def reveals(text: str, secret: str = CANARY) -> bool:
    """True when ``text`` shows ``secret`` plain or under any decoding the project promises to cover."""
    views = {
        text,
        _json_unescape(text),
        unquote(text),
        unquote(_json_unescape(text)),
        _json_unescape(unquote(text)),
    }
    if any(secret in view for view in views):
        return True
    raw = secret.encode()
    return any(raw in blob for view in views for blob in (*base64_decodings(view), *_hex_decodings(view)))
