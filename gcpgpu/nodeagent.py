"""The follower's old module name, still run: a node whose startup script an older gcpgpu rendered (before the
follower moved to gcpgpu.node.agent) runs `python -m gcpgpu.nodeagent` from whatever image its gcpgpu-agent
metadata names, and today's `cluster autostop` and `job submit --detach` name today's image there
(image/follower.py). A node keeps its startup script until it is re-created, so this name stays in the
image until no such node can be left: the follower is gcpgpu.node.agent."""

from gcpgpu.node.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
