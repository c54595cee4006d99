"""GPU clusters: spec (validated input) -> plan (resources, pure) -> apply (through the Compute API)."""
