"""Turn rules: drift checks and the freshness classifier."""
