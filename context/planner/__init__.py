"""The planner (spec §4): which past turns a request carries and at what fidelity, and the records of what it decided."""
