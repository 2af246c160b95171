"""History and cards: the TurnIndex and its records, turn cards, the card library and presentations, full-record rendering, compaction packets."""
