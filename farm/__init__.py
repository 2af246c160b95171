"""The eval farm: probe, replay and live units across models and sessions, on Ray (docs/FARM.md)."""
