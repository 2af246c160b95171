"""Chat templates vak-context ships to llama.cpp (package data: the .jinja files here)."""
