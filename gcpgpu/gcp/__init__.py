"""Thin adapters over Google's client libraries (imported lazily: they cost seconds to load).

clients.py     the one place that builds Google clients, for the real cloud or for the emulator.
compute.py     google.cloud.compute_v1, one service at a time.
operations.py  Compute mutations called safely, and their operations waited on, many at a time.
errors.py      what a Google error means for the tool: stockout, quota, transient or permanent.
clock.py       the tool's clock for what it waits on in the cloud: leases, polls, idle and stall
               times, backoff.
identity.py    who is calling: the credentials' Google identity, written on the jobs and clusters it makes.
"""
