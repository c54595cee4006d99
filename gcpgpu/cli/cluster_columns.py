"""The columns `gcpgpu cluster status` and `cluster list` show (formatters import cluster/ lazily)."""

from __future__ import annotations

from typing import Any

from gcpgpu.output import Column

NODE_COLUMNS = [("name", "NAME"), ("zone", "ZONE"), ("internal_ip", "INTERNAL IP"), ("status", "STATUS"),
                ("gpus", "GPUS"), ("rank", "RANK"), ("block", "BLOCK"), ("subblock", "SUB-BLOCK")]


def _uptime(value: Any) -> str:
    from gcpgpu.cluster.cost import shown_uptime

    return shown_uptime(value)


def _money(value: Any) -> str:
    from gcpgpu.cluster.cost import shown_cost

    return shown_cost(value)


def _autostop(value: Any) -> str:
    from gcpgpu.cluster.autostop import shown

    return shown(value)


# Node-hours since each node's last start x the catalog's hourly price ('-': no price, or not running).
COST_COLUMNS = [Column("uptime_s", "UPTIME", justify="right", format=_uptime),
                Column("cost_usd", "COST SO FAR", justify="right", format=_money)]
AUTOSTOP_COLUMN = Column("autostop", "AUTOSTOP", format=_autostop)
