"""The card-definition library: one JSON Schema per card type (loaded by ``vak_context.context.history.cards``)."""
