"""What runs on a node or inside the training image, not on the user's machine.

launch     the image's preflight: machine type, NCCL profile, host checks, rendezvous (light imports only:
           no Google client, no torch, so torch starts from a checked environment)
workspace  the user's workspace: unpacks the staged --workdir, makes the mounts' links, reads secrets,
           runs setup, drops root and execs the user's command
launcher_hint  the note for a command of a job of several processes that starts no launcher (RANK unset)
ckptsync   a user command's GCPGPU_CKPT_DIR: emptied or restored before it starts, its complete step folders
           uploaded to the output directory beside it
reporter   the trainer-side metrics reporter: the trainer's JSON log -> Cloud Monitoring
nics       every node's NIC counters (sysfs, /proc/net/snmp) sampled each second, host vs GPU fabric, written
           to Cloud Monitoring per interval (the emulator points it at a node's fake sysfs)
agent      the node agent: a cluster node's follower (job following, recovery, autostop)
service    what a node's long-running programs share (the follower, the Slurm daemons' supervisor): their
           arguments, clients, log lines, and SIGTERM as the node going
upload     `python -m gcpgpu.node.upload gs://... FILE...`: the entrypoint copies a profile's files to
           Cloud Storage (apart from the preflight, which must not import a Google client)
jobmeta    the metadata server a job's container sees on a cluster with --job-service-account: its own
           account's token (minted by IAM Credentials), never the node's; standard library only
warm       what the node programs import of Google's clients when they first call, imported ahead by
           the process they are forked from (the emulator's forkserver), so each starts warm
"""
