"""Evidence and digests: result windows, shape-aware digests (one module per shape in `shapes/`), body text, the pure half of recall."""
