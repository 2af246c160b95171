"""A replay unit's session chain is read once per worker process (vak_context.farm.tasks.session_chain)."""

from __future__ import annotations

from pathlib import Path

from vak_context.farm.sessions import materialise
from vak_context.farm.spec import parse_farm_spec
from vak_context.farm.tasks import SESSION_CHAINS, session_chain
from vak_context.storage.ledger import LedgerStore

SPEC = """
[[models]]
name = "m"
kind = "endpoint"
base_url = "http://127.0.0.1:9/v1"
model = "m"
[[sessions]]
name = "gen"
kind = "generated"
seed = 3
turns = 2
[[tasks]]
name = "replay"
kind = "replay"
"""


def test_a_session_chain_is_read_once_per_worker_and_a_worker_keeps_a_few(tmp_path: Path) -> None:
    """The second unit of a session gets the very chain the first read (no second read of the ledger), the
    ledger's own chain, decodable; once SESSION_CHAINS other sessions were read, it is read again."""
    spec = parse_farm_spec(SPEC, base_dir=tmp_path)
    mat = materialise(spec.sessions[0], tmp_path / "ledgers")
    chain, decode = session_chain(mat.root, mat.source_head)
    assert session_chain(mat.root, mat.source_head)[0] is chain
    with LedgerStore(mat.root, readonly=True) as reader:
        assert [e.id for e in chain] == [e.id for e in reader.chain_to_root(mat.source_head)]
        assert [decode(e) for e in chain] == [reader.mapper.payload_of(e) for e in chain]

    for i in range(SESSION_CHAINS):  # others push it out: a worker's memory stays bounded
        other = materialise(spec.sessions[0], tmp_path / f"more{i}")
        session_chain(other.root, other.source_head)
    reread, _ = session_chain(mat.root, mat.source_head)
    assert reread is not chain and [e.id for e in reread] == [e.id for e in chain]
