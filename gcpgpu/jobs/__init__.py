"""Training jobs: one spec, run as a Vertex AI custom job or on a gcpgpu cluster's VMs.

submit.py   job submit's one path: validate -> image -> workdir -> place -> submit
route.py    the one routing point by target for status, cancel, logs and list
state.py    JobState, the typed state every reader shares, and which states are final
detail.py   what job status adds: cost so far, steps redone, the failure's cause from the log, goodput
goodput.py  how much of the job's node-time trained, and where the rest went (README, "Goodput")
steplines.py the log lines that say how far a job got: steps, resumes, checkpoints
spec.py     JobSpec from flags and/or a YAML file, validated before any API call
vertex.py   the CustomJob (templates/vertex_custom_job.yaml.j2) and aiplatform_v1 calls
cluster.py  the job on a cluster's nodes: instance metadata in, guest attributes back
logs.py     a job's Cloud Logging entries
ids.py      job ids that say where a job lives (vertex:LOCATION:ID, cluster:NAME:JOB)
"""
