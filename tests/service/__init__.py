"""Service tier: a loopback fake HTTP server or a child process of ours (the vak CLI, a kernel); no Ray, no model."""
