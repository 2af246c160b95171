"""How a stored tool-result body's bytes are shown as text (spec §3). Pure, and never raises.

UTF-8 bytes are the text. Text with a few bytes that are not UTF-8 shows each as ``\\xNN``. Anything
else is binary: a ``BINARY_HEADER`` line, then a hex dump. The digest shapes key "binary" on that
header (``vak_context.context.evidence.shapes.binary``), so it lives here, below them.
"""

from __future__ import annotations

import re

# The first line body_text writes for bytes that are not text; detect_shape keys "binary" on it.
BINARY_HEADER = "[binary: "

_SURROGATE = re.compile("[\udc80-\udcff]")
_CONTROL_BYTES = re.compile(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]")
_PRINTABLE = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


def body_text(blob: bytes, encoding: str) -> str:
    """The text a model sees for a stored body. Never raises.

    UTF-8 bytes (whatever ``encoding`` says) are returned as they decode, byte for byte. Text with a
    few bytes that are not UTF-8 (no NUL, few control bytes, at most a quarter bad) shows each bad
    byte as ``\\xNN`` and keeps its lines. Anything else is binary: a ``[binary: …]`` header line,
    then a hex dump of every byte, 16 a line, with offsets and the printable characters.
    """
    data = bytes(blob)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8", "binary", ""):
        try:
            return data.decode(encoding, errors="backslashreplace")
        except (LookupError, UnicodeError, ValueError, TypeError):
            pass  # an encoding Python does not know, or a codec that is not text: show the bytes as below
    if b"\x00" not in data:
        loose = data.decode("utf-8", errors="surrogateescape")
        bad = len(_SURROGATE.findall(loose))
        if bad * 4 <= len(data) and len(_CONTROL_BYTES.findall(data)) * 100 <= len(data):
            return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", loose)
    return hex_dump(data)


def hex_dump(data: bytes) -> str:
    """``body_text``'s view of binary bytes: a header line, then 16 bytes a line."""
    kind = guess_binary_kind(data)
    lines = [
        f"{BINARY_HEADER}{len(data)} bytes, not UTF-8 text{'; looks like ' + kind if kind else ''}; "
        "hex dump below, 16 bytes a line]\n"
    ]
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        lines.append(f"{offset:08x}  {chunk.hex(' '):<47}  |{chunk.translate(_PRINTABLE).decode('ascii')}|\n")
    return "".join(lines)


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"(\xb5/\xfd", "zstd data"),
    (b"\x7fELF", "an ELF executable"),
    (b"MZ", "a Windows executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x00asm", "a WebAssembly module"),
    (b"ARROW1", "an Arrow file"),
    (b"PAR1", "a Parquet file"),
)


def guess_binary_kind(data: bytes) -> str:
    """What binary bytes look like, from their leading magic number; "" when unknown."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image"
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    return ""
