"""Live tier: talks to the real local llama.cpp model server (some also need Ray)."""
