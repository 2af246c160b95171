"""Child process for the crash test: appends forever, printing each id once append() returns."""

from __future__ import annotations

import random
import sys
import threading

from events.payloads import EvidenceBody, Nudge
from storage.ledger import LedgerStore


def main(root: str, seed: int) -> None:
    store = LedgerStore(root)
    rng = random.Random(seed)
    lock = threading.Lock()

    def writer(w: int) -> None:
        r = random.Random(seed * 100 + w)
        while True:
            n = r.choice([1, 1, 4, 16])
            payloads: list = []
            blobs: list = []
            for i in range(n):
                if r.random() < 0.2:
                    body = bytes(r.getrandbits(8) for _ in range(r.randint(1000, 200_000)))
                    payloads.append(EvidenceBody(tool_use_id=f"t{w}-{i}", tool_name="bash", encoding="binary",
                                                 chars=len(body), bytes=len(body)))
                    blobs.append(body)
                else:
                    payloads.append(Nudge(tag="crash", text=f"writer {w} " + "x" * r.randint(0, 5000)))
                    blobs.append(None)
            ids = store.append("crash", payloads, blobs=blobs)
            with lock:
                sys.stdout.write("\n".join(ids) + "\n")
                sys.stdout.flush()

    for w in range(rng.choice([1, 4])):
        threading.Thread(target=writer, args=(w,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
