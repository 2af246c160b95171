"""The pure engine: capacity, turns, evidence, cards, planner, assemble. No I/O here."""
