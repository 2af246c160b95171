"""The ledger's segment files (docs/LEDGER_FORMAT.md): ``files`` names, lists and scans them, ``schema`` is the
Arrow schema and the entries to and from record batches, ``writer`` appends to the open tail and seals it,
``footer`` reads a sealed segment's footer against its batches."""
