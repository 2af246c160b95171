"""Stated state (docs/STATE.md): what the user stated that binds later turns, kept as ``work_contract`` items."""
