"""Smoke tests of the benchmark scripts (`bench/`): each runs on CPU with the tiny model in
seconds, so a bench that no longer starts is caught before a device run is spent on it."""
