"""The library over the actors: a live session's wiring (`live`), the local Ray start-up, and reports of a session and its plans."""
