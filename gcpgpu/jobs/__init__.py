"""Training jobs: one spec, run as a Vertex AI custom job or on a gcpgpu cluster's VMs.

The target-neutral face of every job, and Vertex AI's backend:

route.py     the one routing point by target for status, cancel, logs, list and follow
submit.py    job submit's one path: validate -> place -> image -> workdir -> submit
spec.py      JobSpec from flags and/or a YAML file, validated before any API call
state.py     JobState, the typed state every reader shares, and which states are final
ids.py       job ids that say where a job lives (vertex:LOCATION:ID, cluster:NAME:JOB)
follow.py    following a job to its end from here (job follow, --wait, cancel --wait)
detail.py    what job status adds: cost so far, steps redone, the failure's cause from the log, goodput
goodput.py   how much of the job's node-time trained, and where the rest went (README, "Goodput")
steplines.py the log lines that say how far a job got: steps, resumes, checkpoints
logs.py      a job's Cloud Logging entries
policy.py    retries, stall timeout and webhooks: checked before any call, kept in the job's record
notify.py    the webhooks a job's changes of state are told to
usercode.py  a user's own code: --command, --setup, --mount, --secret, --workdir, as every target runs them
workdir.py   --workdir staged in the project's bucket
vertex.py    the CustomJob (templates/vertex_custom_job.yaml.j2) and aiplatform_v1 calls
cluster/     a gcpgpu cluster's jobs: their record, placement and delivery, and a backend per scheduler
"""
