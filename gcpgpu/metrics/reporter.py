"""Kept for one release: images built by an older gcpgpu run `python -m gcpgpu.metrics.reporter`.
The reporter is gcpgpu.node.reporter."""

from gcpgpu.node.reporter import main

if __name__ == "__main__":
    raise SystemExit(main())
