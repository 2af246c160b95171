"""vak-context tests (a package, so test modules and the shared fakes import as ``tests.*``)."""
