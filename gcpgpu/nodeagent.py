"""Kept for one release: nodes started by an older gcpgpu run `python -m gcpgpu.nodeagent`.
The node agent is gcpgpu.node.agent."""

from gcpgpu.node.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
