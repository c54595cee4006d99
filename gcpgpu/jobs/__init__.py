"""Training jobs: one spec, run as a Vertex AI custom job or on a gcpgpu cluster's VMs.

spec.py     JobSpec from flags and/or a YAML file, validated before any API call
vertex.py   the CustomJob (templates/vertex_custom_job.yaml.j2) and aiplatform_v1 calls
cluster.py  the job on a cluster's nodes: instance metadata in, guest attributes back
logs.py     a job's Cloud Logging entries
ids.py      job ids that say where a job lives (vertex:LOCATION:ID, cluster:NAME:JOB)
"""
