"""Bench tier: smoke tests of the scripts in bench/ (tiny sizes, no timing asserts)."""
