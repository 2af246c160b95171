"""The child process tests/service/test_doc_examples.py runs one doc's code blocks in:
``python -m tests.fakes.doc_runner FOLDER...``, each folder holding one block as ``example.py``.

Each block runs as a program (``runpy``, as ``__main__``), in its own folder as the working directory, one
after another in this one process (the imports are paid once a doc, not once a block), under the loopback
guard of the tests (tests/fakes/network.py): an example that reaches for anything but 127.0.0.1 fails. A
block that raises (``SystemExit`` other than 0 included) is reported on stderr between ``BLOCK-FAILED
FOLDER`` and ``BLOCK-END`` with its traceback, and the next block still runs; the exit status is the number
of blocks that failed."""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback

from tests.fakes.network import loopback_only


def run(folder: str) -> bool:
    os.chdir(folder)
    print(f"BLOCK-START {folder}", flush=True)
    started = time.monotonic()
    try:
        with loopback_only():
            runpy.run_path(os.path.join(folder, "example.py"), run_name="__main__")
    except SystemExit as exc:
        if exc.code in (None, 0):
            return True
        print(f"BLOCK-FAILED {folder}\nSystemExit({exc.code!r})\nBLOCK-END", file=sys.stderr, flush=True)
        return False
    except BaseException:
        print(f"BLOCK-FAILED {folder}\n{traceback.format_exc()}BLOCK-END", file=sys.stderr, flush=True)
        return False
    finally:
        print(f"BLOCK-TIME {folder} {time.monotonic() - started:.2f}", flush=True)
    return True


def main(folders: list[str]) -> int:
    return sum(not run(os.path.abspath(f)) for f in folders)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
