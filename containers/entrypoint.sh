#!/usr/bin/env bash
# The gcpgpu training image's entrypoint: apply this machine's NCCL profile, work out the torchrun
# rendezvous, and run the trainer (under Nsight Systems when GCPGPU_PROFILE=1).
#
#   docker run IMAGE --steps 100 ...        trainer flags: torchrun -m gcpgpu.trainer --steps 100 ...
#   docker run IMAGE all_reduce_perf ...    a command: run it with the same NCCL environment
#
# The deciding is done in Python (gcpgpu/launch.py, which documents every input); this script
# only evals its answer and builds the command line. Environment it reads here:
#   GCPGPU_PROFILE=1            wrap torchrun in `nsys profile` (capture range: the trainer's
#                               --profile-steps, GCPGPU_PROFILE_STEPS or 10:12 by default)
#   GCPGPU_PROFILE_DIR          where nsys writes reports (default /tmp/gcpgpu-nsys)
#   GCPGPU_OUTPUT_DIR           where reports are copied afterwards (gs:// or a path); default
#                               AIP_MODEL_DIR, which Vertex AI sets from the job's output directory
#   GCPGPU_TRAINER_MODULE       the module torchrun runs (default gcpgpu.trainer)
#   GCPGPU_PYTHON               the Python that runs gcpgpu.launch (default python3)
set -euo pipefail

log() { printf 'gcpgpu-entrypoint: %s\n' "$*" >&2; }

python_bin="${GCPGPU_PYTHON:-python3}"

# Machine type, NCCL profile, plugin/device/NIC checks, rendezvous. On a refusal gcpgpu.launch
# has already said why in one line; pass its exit status on.
plan="$("$python_bin" -m gcpgpu.launch env)" || exit $?
eval "$plan"

if [[ $# -gt 0 && $1 != -* ]]; then
  exec "$@"
fi

profiling=0
if [[ ${GCPGPU_PROFILE:-0} == 1 ]]; then
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

cmd=(torchrun
  --nproc-per-node "$GCPGPU_NPROC_PER_NODE"
  --nnodes "$GCPGPU_NNODES"
  --node-rank "$GCPGPU_NODE_RANK"
  --master-addr "$GCPGPU_MASTER_ADDR"
  --master-port "$GCPGPU_MASTER_PORT"
  -m "${GCPGPU_TRAINER_MODULE:-gcpgpu.trainer}"
  "$@")

if [[ $profiling == 0 ]]; then
  exec "${cmd[@]}"
fi

report_dir="${GCPGPU_PROFILE_DIR:-/tmp/gcpgpu-nsys}"
mkdir -p "$report_dir"
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
      "$python_bin" -m gcpgpu.launch upload "$dest" "${files[@]}" && return 0
    fi
    log "could not copy the report to $dest: it stays in $report_dir"
    return 0
  fi
  mkdir -p "$dest" && cp "${files[@]}" "$dest/" && log "report copied to $dest" && return 0
  log "could not copy the report to $dest: it stays in $report_dir"
}

# Not exec: the report is copied after the run, even a failed one. Signals (a Spot VM's
# preemption, Vertex stopping the job) go on to the run so it can checkpoint and end.
nsys profile -t cuda,nvtx,osrt,cudnn,cublas --capture-range=cudaProfilerApi -o "$report" "${cmd[@]}" &
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
upload_reports
exit "$status"
