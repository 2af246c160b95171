"""Ray tier: needs the shared local Ray cluster (the ``ray_cluster`` fixture) or starts a Ray of its own."""
