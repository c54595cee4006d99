"""The training image, built from the user's machine, and which image runs what.

service     `gcpgpu container build` as one call: check, choose where to build, build, push, remember
build       the build context, the Cloud Build request, and running either build
user_layer  `container build --context DIR`: the user's code and dependencies layered on gcpgpu's image
pack        a user's folder packed into one deterministic tar.gz (job submit --workdir, --context)
ignore      .gitignore and .gcpgpuignore patterns, matched as git matches them
name        the image's name and repository, and the follower's words the cluster room writes (vocabulary)
default     the image a job runs when it names none (this machine's record, else Artifact Registry)
follower    the image a cluster's follower (autostop, detached jobs) and Slurm daemons run from
"""
