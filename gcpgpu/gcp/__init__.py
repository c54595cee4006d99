"""Thin adapters over Google's client libraries (imported lazily: they cost seconds to load)."""
