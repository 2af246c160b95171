"""Request assembly: the normalized messages, the tool surface, the stable prefix and moving tail, and the one tool-call parser."""
