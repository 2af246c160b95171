"""The pure engine (no I/O, no clock), one sub-package per concern: capacity, history (turns and cards),
evidence (windows and digests), planner, request (assembly and the tool-call parser), rules."""
