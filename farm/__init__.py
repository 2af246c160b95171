"""Jobs, the CLI (`vak`), the session generator and the local Ray set-up."""
