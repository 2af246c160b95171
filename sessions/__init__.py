"""Generated sessions: realistic agent sessions and long coding turns, deterministic from a seed."""
