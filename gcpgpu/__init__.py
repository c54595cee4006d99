"""gcpgpu: GPU training clusters, jobs, containers and metrics on Google Cloud."""

__version__ = "0.1.0"
