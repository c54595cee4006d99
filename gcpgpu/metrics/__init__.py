"""Network, GPU and training metrics from Cloud Monitoring, for a whole cluster or Vertex job at once.

sources.py   which metric types, how each is aligned and reduced server-side, how to enable it
target.py    --cluster / --job: the resources, filters and groupings (a cluster's VMs by label)
query.py     one ListTimeSeries call per metric type per refresh, in parallel, read raw
view.py      rows per node and GPU, the total, stragglers, n/a
render.py    those rows drawn: a table with sparklines, or records for JSON / CSV
tail.py      the refresh loop behind `gcpgpu metrics tail`
report.py    matplotlib panels over a window, to PNG or a self-contained HTML page
dashboard.py a Cloud Monitoring dashboard per cluster from templates/dashboard.json.j2
focus.py     a big cluster's tail: the worst nodes and GPUs and every straggler, not every row
freshness.py whether a value the tail shows is live, so old numbers never pass for now
jobspan.py   when the job a view watches ran: its state, start and end, from one status read
nics.py      the network per node from each NIC's own counters: GPU fabric apart from host, CNPs, retransmits
netdoctor.py `cluster doctor`'s network section: links, speeds, errors, the slow NIC named with its node
steps.py     a job's numbers per step, from its own log: `metrics report --job`'s training panels
"""
