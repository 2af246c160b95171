"""The turn loop: bind a model, project the ledger, call it, write what came back."""
