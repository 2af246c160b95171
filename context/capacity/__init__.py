"""Capacity: the CapacityProfile and its feedback, the probe ladder's pure half, the one chars-to-tokens estimate."""
