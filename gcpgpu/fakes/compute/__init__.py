"""The emulator's Compute Engine v1: VMs, their capacity and their lifecycle, as the real API shows them.

backend.py           ComputeBackend: the part of the emulator that knows what a VM is, composed of the
                     resource families below; it lives at `emulator.compute`.
state.py             what every family shares: projects, the lock, the clock, ids, helpers.
catalog.py           the read-only catalog (zones, regions, machine and accelerator types, images) and quotas.
crud.py              get, list, aggregatedList and delete, the same for every resource kind.
filters.py           the list `filter` grammar, as users and gcloud write it.
schema.py            request bodies checked against Compute Engine v1's published schema.
links.py             resource references and fingerprints, checked on every write.
operations.py        zone, region and global operations, made by every mutation.
projects.py          the project's commonInstanceMetadata, set under an optimistic fingerprint.
instance_spec.py     an instance body checked as the API checks it, and turned into the stored resource.
instances.py         instances: admission (reservations, placement, quota, capacity), insert, bulkInsert,
                     lifecycle, and the light summaries the emulator's own watchers read.
gpus.py              an instance's guestAccelerators, checked as at insert.
templates.py         instance templates, global and regional.
migs.py              managed instance groups and their resize requests.
flex.py              DWS flex-start: an insert that waits for capacity.
placement.py         resource policies (compact placement) and reservations.
dense.py             DENSE reservations: blocks, sub-blocks, the VMs bound to them and where they sit.
topology.py          where a compact-placed VM sits in the fabric (physicalHostTopology).
future.py            future reservations (calendar mode) and advice.calendarMode, on the emulator's clock.
maintenance.py       host maintenance seen coming, and hosts reported faulty.
preemption.py        losing a VM: Spot preemption and host errors, as the API's readers see them.
runtime.py           scheduling.maxRunDuration: the VM ended when its run time is up.
disks.py             standalone zonal disks and attaching them (Hyperdisk ML's read-only sharing above all).
networks.py          networks, subnetworks, firewalls and global addresses.
netops.py            network reads and firewall edits that provisioners call around creating VMs.
routers.py           Cloud Routers and their Cloud NAT gateways.
rest.py              Compute Engine v1 (and beta) over REST/JSON: paths, query parameters, list shapes.
rest_reservations.py REST for reservation capacity: reservationBlocks, reservationSubBlocks,
                     futureReservations, advice.calendarMode, instances.reportHostAsFaulty.
guest_attributes.py  instances.getGuestAttributes: the wire format of what nodes report (the job agent's
                     reports and the VM's own scripts', guest/reports.py).
"""
