"""Documented provider response bodies (the JSON files here) and the scripted transport the wire tests use."""
