"""What the project's clusters and jobs have cost, across targets and after a cluster is gone: above
cluster/ and jobs/, whose COST SO FAR figures it sums; the CLI and the node's follower use it.

ledger.py    a deleted cluster's cost record (and its jobs'), kept in project metadata `gcpgpu-costs`
report.py    `cost report`: every cluster's and job's node-hours and dollars, by job, cluster, label or user
"""
