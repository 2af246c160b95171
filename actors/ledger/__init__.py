"""A ledger folder's one writer on Ray and the one way callers reach it: ``actor`` (the LedgerActor),
``client`` (``LedgerClient``, over a LedgerStore here or the actor) and ``remote`` (the contract as actor
calls, imported only for an actor handle, so an in-process client never imports Ray)."""
