"""Unit tier: pure code in this process (LedgerStore on tmp_path, httpx.MockTransport); no Ray, no server, no model."""
