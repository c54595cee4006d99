#!/usr/bin/env bash
# The gcpgpu training image's entrypoint: apply this machine's NCCL profile, work out the torchrun
# rendezvous, bring the user's code, data and secrets, and run the trainer (under Nsight Systems when
# GCPGPU_PROFILE=1) or the user's command.
#
#   docker run IMAGE --steps 100 ...        trainer flags: torchrun -m gcpgpu.trainer --steps 100 ...
#   docker run IMAGE all_reduce_perf ...    a command: run it with the same NCCL environment
#
# Both get MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, NPROC_PER_NODE (and GCPGPU_* twins), the same
# on a cluster node and in a Vertex AI replica. The user's code (gcpgpu/node/workspace.py documents them):
#   GCPGPU_WORKDIR=gs://B/P.tar.gz   unpacked into /workdir (GCPGPU_WORKDIR_DIR), the working directory
#   GCPGPU_MOUNTS=JSON               [{"source": "gs://B/P", "target": "/data", "ro": true}]: /data -> /gcs/B/P
#   GCPGPU_SECRETS=JSON              {"ENV": "projects/P/secrets/S/versions/V"}: read from Secret Manager into
#                                    the setup's and the command's environment, never into this shell
#   GCPGPU_SETUP=CMD                 `bash -c CMD` in /workdir before the command; its failure ends the run
#                                    with its status and "gcpgpu-entrypoint: setup failed (exit N): <last line>"
#   GCPGPU_RESUME=1, GCPGPU_RESTART=N   set by job submit after a recovery or retry; passed on as they are
#   GCPGPU_USER=trainer              started as root: make the mounts' links, then run all of this as that user
#   GCPGPU_CKPT_DIR                  set here for a user's command (gcpgpu/node/ckptsync.py): a folder on this
#                                    node whose complete step_NNNNNNNN/ folders (.metadata written last) are
#                                    uploaded to OUTPUT/ckpt/node-RANK/ in the background; on a resume the
#                                    newest complete one is copied back into it before the command starts
#
# The deciding is done in Python (gcpgpu/node/launch.py, which documents every input); this script
# only evals its answer and builds the command line. Environment it reads here:
#   GCPGPU_PROFILE=1            wrap torchrun in `nsys profile` (capture range: the trainer's
#                               --profile-steps, GCPGPU_PROFILE_STEPS or 10:12 by default)
#   GCPGPU_PROFILE_DIR          where nsys writes reports (default /tmp/gcpgpu-nsys)
#   GCPGPU_OUTPUT_DIR           where reports are copied afterwards (gs:// or a path); default
#                               AIP_MODEL_DIR, which Vertex AI sets from the job's output directory
#   GCPGPU_TRAINER_MODULE       the module torchrun runs (default gcpgpu.trainer)
#   GCPGPU_PYTHON               the Python that runs gcpgpu.node.launch and the reporter (default python3)
#   GCPGPU_METRICS=0            do not send the trainer's --log-json numbers to Cloud Monitoring
#   GCPGPU_REPORTER_CMD         the metrics reporter's command, split on spaces (default
#                               "$GCPGPU_PYTHON -m gcpgpu.node.reporter"; a test seam)
#   GCPGPU_NICS_CMD             the NIC sampler's command, likewise (default "$GCPGPU_PYTHON -m gcpgpu.node.nics")
#
# Every node of a gcpgpu cluster also runs gcpgpu.node.nics beside the job (trainer or command): each NIC's
# own counters, every second, to Cloud Monitoring; stopped with SIGTERM once the job has ended.
#
# The trainer's numbers: on node 0, when the trainer flags have --log-json FILE, gcpgpu.node.reporter
# runs in the background beside torchrun (cluster name from GCPGPU_CLUSTER or the VM's metadata, job id
# from CLOUD_ML_JOB_ID), and is stopped with SIGTERM once the trainer has ended, so its last points are
# written. A reporter that cannot start or write never stops the training.
set -euo pipefail

log() { printf 'gcpgpu-entrypoint: %s\n' "$*" >&2; }

python_bin="${GCPGPU_PYTHON:-python3}"

# The image starts as root only so that the mounts' links can be made anywhere (Vertex AI: /data -> /gcs/B/P
# needs to write /). With GCPGPU_USER set (the image sets trainer), root makes them and this script starts
# again as that user, with its HOME: the setup, the command and the trainer never run as root.
if [[ -n ${GCPGPU_USER:-} && $EUID == 0 ]]; then
  exec "$python_bin" -m gcpgpu.node.launch become-user -- bash "${BASH_SOURCE[0]}" "$@"
fi

# Machine type, NCCL profile, plugin/device/NIC checks, rendezvous. On a refusal gcpgpu.node.launch
# has already said why in one line; pass its exit status on.
gcpgpu_reporter_args=()  # set by the plan when node 0's trainer writes --log-json
gcpgpu_nics_args=()  # set by the plan on a cluster's node: gcpgpu.node.nics beside the job
gcpgpu_numa_args=()  # set by the plan where torchrun can bind each rank to its GPU's NUMA node
plan="$("$python_bin" -m gcpgpu.node.launch env -- "$@")" || exit $?
eval "$plan"

# Secrets and setup: gcpgpu.node.launch reads the secrets, runs the setup, then execs the command, so the
# values never pass through this shell (no `set -x` trace, no eval'd plan, no file holds them).
launcher=()
if [[ -n ${GCPGPU_SECRETS:-} || -n ${GCPGPU_SETUP:-} ]]; then
  launcher=("$python_bin" -m gcpgpu.node.launch exec --)
fi

# A user's command gets GCPGPU_CKPT_DIR (gcpgpu/node/ckptsync.py): a folder on this node, emptied, holding on a
# resume (GCPGPU_RESUME=1) the newest checkpoint complete in OUTPUT/ckpt/node-RANK/; with an output directory,
# its complete step folders are uploaded there in the background while the command runs, and once more after.
user_command=0
gcpgpu_ckpt_upload=0
if [[ $# -gt 0 && $1 != -* ]]; then
  user_command=1
  ckpt_plan="$("$python_bin" -m gcpgpu.node.ckptsync env)" || exit $?
  eval "$ckpt_plan"
  if [[ $gcpgpu_ckpt_upload == 0 ]]; then
    exec ${launcher[@]+"${launcher[@]}"} "$@"
  fi
fi

profiling=0
if [[ $user_command == 0 && ${GCPGPU_PROFILE:-0} == 1 ]]; then
  profiling=1
  # nsys only records between cudaProfilerStart and Stop: the trainer calls them around
  # --profile-steps, so make sure it has a window.
  has_window=0
  for arg in "$@"; do
    [[ $arg == --profile-steps || $arg == --profile-steps=* ]] && has_window=1
  done
  if [[ $has_window == 0 ]]; then
    set -- "$@" --profile-steps "${GCPGPU_PROFILE_STEPS:-10:12}"
  fi
fi

if [[ $user_command == 1 ]]; then
  cmd=("$@")
else
  cmd=(torchrun
    ${gcpgpu_numa_args[@]+"${gcpgpu_numa_args[@]}"}
    --nproc-per-node "$GCPGPU_NPROC_PER_NODE"
    --nnodes "$GCPGPU_NNODES"
    --node-rank "$GCPGPU_NODE_RANK"
    --master-addr "$GCPGPU_MASTER_ADDR"
    --master-port "$GCPGPU_MASTER_PORT"
    -m "${GCPGPU_TRAINER_MODULE:-gcpgpu.trainer}"
    "$@")
fi

if [[ $profiling == 0 && ${#gcpgpu_reporter_args[@]} == 0 && ${#gcpgpu_nics_args[@]} == 0 && $gcpgpu_ckpt_upload == 0 ]]; then
  exec ${launcher[@]+"${launcher[@]}"} "${cmd[@]}"
fi

reporter_pid=""
start_reporter() {
  local reporter_cmd=()
  read -r -a reporter_cmd <<<"${GCPGPU_REPORTER_CMD:-}"
  if [[ ${#reporter_cmd[@]} == 0 ]]; then
    reporter_cmd=("$python_bin" -m gcpgpu.node.reporter)
  fi
  # In the background, and only ever logging: if it cannot start (or dies), the training goes on.
  "${reporter_cmd[@]}" "${gcpgpu_reporter_args[@]}" --pid "$$" </dev/null &
  reporter_pid=$!
}

stop_reporter() {
  [[ -n $reporter_pid ]] || return 0
  # SIGTERM: it writes what it has read since its last point, then exits. At most 30 s: never hangs the job.
  kill -TERM "$reporter_pid" 2>/dev/null || true
  local tenths=0
  while kill -0 "$reporter_pid" 2>/dev/null && ((tenths < 300)); do
    sleep 0.1
    tenths=$((tenths + 1))
  done
  kill -KILL "$reporter_pid" 2>/dev/null || true
  wait "$reporter_pid" 2>/dev/null || true
  reporter_pid=""
}

if [[ ${#gcpgpu_reporter_args[@]} -gt 0 ]]; then
  start_reporter
fi

nics_pid=""
if [[ ${#gcpgpu_nics_args[@]} -gt 0 ]]; then
  nics_cmd=()
  read -r -a nics_cmd <<<"${GCPGPU_NICS_CMD:-}"
  if [[ ${#nics_cmd[@]} == 0 ]]; then
    nics_cmd=("$python_bin" -m gcpgpu.node.nics)
  fi
  # In the background, and only ever logging: a sampler that cannot start or write never stops the job.
  "${nics_cmd[@]}" "${gcpgpu_nics_args[@]}" --pid "$$" </dev/null &
  nics_pid=$!
fi
stop_nics() {
  [[ -n $nics_pid ]] || return 0
  kill -TERM "$nics_pid" 2>/dev/null || true  # it writes its last interval, then exits
  local tenths=0
  while kill -0 "$nics_pid" 2>/dev/null && ((tenths < 150)); do
    sleep 0.1
    tenths=$((tenths + 1))
  done
  kill -KILL "$nics_pid" 2>/dev/null || true
  wait "$nics_pid" 2>/dev/null || true
  nics_pid=""
}

ckpt_pid=""
if [[ $gcpgpu_ckpt_upload == 1 ]]; then
  # In the background, and only ever logging: an upload that fails never stops the command.
  "$python_bin" -m gcpgpu.node.ckptsync upload </dev/null &
  ckpt_pid=$!
fi
stop_ckpt_upload() {
  [[ -n $ckpt_pid ]] || return 0
  # SIGTERM: it uploads what the command completed last, then exits. At most 60 s: a stuck mount never hangs the job.
  kill -TERM "$ckpt_pid" 2>/dev/null || true
  local tenths=0
  while kill -0 "$ckpt_pid" 2>/dev/null && ((tenths < 600)); do
    sleep 0.1
    tenths=$((tenths + 1))
  done
  kill -KILL "$ckpt_pid" 2>/dev/null || true
  wait "$ckpt_pid" 2>/dev/null || true
  ckpt_pid=""
}

report_dir="${GCPGPU_PROFILE_DIR:-/tmp/gcpgpu-nsys}"
report="$report_dir/gcpgpu-node$GCPGPU_NODE_RANK"

upload_reports() {
  local dest="${GCPGPU_OUTPUT_DIR:-${AIP_MODEL_DIR:-}}"
  local files=()
  shopt -s nullglob
  files=("$report".*)
  shopt -u nullglob
  if [[ ${#files[@]} == 0 ]]; then
    log "nsys wrote no report in $report_dir (did the trainer reach its --profile-steps?)"
    return 0
  fi
  if [[ -z $dest ]]; then
    log "no GCPGPU_OUTPUT_DIR or AIP_MODEL_DIR: the report stays in $report_dir"
    return 0
  fi
  dest="${dest%/}/nsys"
  if [[ $dest == gs://* ]]; then
    if command -v gcloud >/dev/null 2>&1; then
      gcloud storage cp "${files[@]}" "$dest/" && return 0
    elif [[ -d /gcs ]]; then
      # Vertex AI mounts every bucket under /gcs (Cloud Storage FUSE).
      local mounted="/gcs/${dest#gs://}"
      mkdir -p "$mounted" && cp "${files[@]}" "$mounted/" && return 0
    else
      "$python_bin" -m gcpgpu.node.upload "$dest" "${files[@]}" && return 0
    fi
    log "could not copy the report to $dest: it stays in $report_dir"
    return 0
  fi
  mkdir -p "$dest" && cp "${files[@]}" "$dest/" && log "report copied to $dest" && return 0
  log "could not copy the report to $dest: it stays in $report_dir"
}

# Not exec: the report is copied and the reporter stopped after the run, even a failed one. Signals
# (a Spot VM's preemption, Vertex stopping the job) go on to the run so it can checkpoint and end.
if [[ $profiling == 1 ]]; then
  mkdir -p "$report_dir"
  cmd=(nsys profile -t "cuda,nvtx,osrt,cudnn,cublas" --capture-range=cudaProfilerApi -o "$report" "${cmd[@]}")
fi
# A background job of a script ignores SIGINT unless it is given back: the INT passed on must count.
(
  trap - INT QUIT
  exec ${launcher[@]+"${launcher[@]}"} "${cmd[@]}"
) &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' TERM
trap 'kill -INT "$child" 2>/dev/null || true' INT
status=0
wait "$child" || status=$?
while kill -0 "$child" 2>/dev/null; do
  status=0
  wait "$child" || status=$?
done
trap - TERM INT
stop_reporter
stop_nics
stop_ckpt_upload
if [[ $profiling == 1 ]]; then
  upload_reports
fi
exit "$status"
