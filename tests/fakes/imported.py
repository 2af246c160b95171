"""The recorded sessions of ``../shared/data/trajectories``, imported once per test run.

``imported`` writes every file of the folder into one ledger (with turn cards and the card index)
through ``vak_context.importers``, the same path `vak import` takes. Tests read the ledger it built; the
recorded files themselves stay in ``../shared``. ``import_tau`` imports one long session (30 user turns) alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vak_context.events.payloads import Activity
from vak_context.importers import ImportOutcome, import_path, import_recording, read_recordings
from vak_context.storage.cardindex import CardIndex
from vak_context.storage.ledger import LedgerStore

TOKENS_PER_CHAR = 0.25

FILES = {
    "spotter": "spotter__fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl",
    "subagent": "spotter__subagent.jsonl",
    "tau": "tau-bench__gpt-4o-airline.json",
    "openhands": "OpenHands__output.jsonl",
    "mini": "mini-swe-agent__django__django-15629.traj.json",
    "swe": "SWE-agent__pydicom__pydicom-1458.traj",
}


@dataclass
class Imported:
    root: Path
    store: LedgerStore
    cards: CardIndex
    reports: dict[str, ImportOutcome]

    def sessions(self, key: str) -> list[str]:
        return [s.session for s in self.reports[key].sessions]


@pytest.fixture(scope="session")
def imported(tmp_path_factory: pytest.TempPathFactory, trajectories: Path) -> Iterator[Imported]:
    recorded = sorted(p.name for p in trajectories.iterdir() if p.name != "README.md")
    assert recorded == sorted(FILES.values()), f"the trajectories folder changed: {recorded}"
    root = tmp_path_factory.mktemp("imported") / "ledger"
    store = LedgerStore(root)
    cards = CardIndex(root)
    reports = {
        key: import_path(store, trajectories / name, tokens_per_char=TOKENS_PER_CHAR, card_index=cards)
        for key, name in FILES.items()
    }
    yield Imported(root, store, cards, reports)
    store.close()


TAU = "tau-bench__gpt-4o-airline.json"
TAU_SESSION = "tau-task9-trial3"  # task 9, trial 3: 30 user turns
TAU_FOLLOW_UP = "Can you confirm the booking total again, with the certificate applied?"


def import_tau(trajectories: Path, root: Path) -> tuple[LedgerStore, str]:
    """The 30-turn tau-bench session, imported through vak_context.importers; returns the store and system prompt."""
    _fmt, recordings, _skipped = read_recordings(trajectories / TAU)
    rec = next(r for r in recordings if r.name.endswith("task9-trial3"))
    store = LedgerStore(root)
    import_recording(store, rec, TAU_SESSION, source_path=str(trajectories / TAU))
    system = ""
    for seq, eid, _parent, kind, _t in store.iter_metadata(TAU_SESSION):
        payload = store.payload(eid) if kind == "activity" else None
        if isinstance(payload, Activity) and payload.activity == "import.system_prompt":
            system = str(payload.detail["text"])
        if seq > 5:
            break
    assert system, "the tau-bench session carries its policy as the system prompt"
    return store, system
