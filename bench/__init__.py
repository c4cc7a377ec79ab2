"""Benchmarks: ``make bench`` runs them all; each writes JSON and a PNG to bench/results/."""
