"""vak-context tests (a package so conftest can load tests.fixtures_model as a plugin)."""
