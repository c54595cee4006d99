"""The bundled GPT trainer that gcpgpu jobs run: `python -m gcpgpu.trainer` or under torchrun.

Importing this package is cheap: torch is only imported by the modules that train.

Starting and placing a run:
  __main__.py        `python -m gcpgpu.trainer`: train, or on Vertex AI start torchrun from CLUSTER_SPEC
  torchrun.py        torchrun's own code, ended as the trainer ends (without the interpreter's teardown)
  argv.py            the trainer's command-line contract as read from outside it (stdlib only)
  config.py          the options: command line (argparse) and an optional YAML/JSON file
  dist.py            where this process sits in the job: torchrun's variables, or CLUSTER_SPEC's
  launch_checks.py   the options' checks that depend on the launch and the machine (world size, GPUs)
The run:
  train.py           the training loop, top to bottom: setup, data, model, optimizer, resume, loop, summary
  model.py           a GPT-2 style decoder: pre-norm blocks, causal attention through SDPA
  loss.py            the output layer and its cross-entropy in chunks of tokens
  data.py            token streams and deterministic, rank-sharded batches
  optim.py           the optimizer step: learning-rate schedule, gradient sync and clipping, AdamW
  evaluate.py        validation loss on the held-out tail of the data
  parallel.py        a plain GPT made the model that trains: fp8, TP, activation checkpointing, compile,
                     DDP/FSDP2
  parallel_tp.py     tensor parallelism inside a node, composed with FSDP2 over the rest
Planning it (pure Python, no torch, so the CLI may import them):
  sizes.py           named GPT sizes and their parameter and FLOP counts
  memory.py          the per-GPU memory planner, from the standard formulas
  layout.py          a parallel layout for a model on a machine, chosen from the memory plan
  autobatch.py       `--batch-size auto` and `--micro-batch auto|N` from the memory plan
  duration.py        how long a run takes: FLOPs per token, the GPUs' peak, an MFU from published runs
Checkpoints:
  checkpoint.py      torch.distributed.checkpoint: each rank writes its own shards, in parallel
  checkpointer.py    saves off the training's critical path (--ckpt-mode async), or on it (sync)
  ckpt_local.py      where the local copy of the checkpoints goes, and which mode auto picks
  ckpt_rule.py       when a checkpoint folder counts: the rule the trainer and GCPGPU_CKPT_DIR share
  nofollow.py        checkpoint folders reached following no link swapped in after the trainer started
What it measures and says:
  metrics.py         tokens/s per GPU, MFU against the GPU's dense bf16 peak, memory, JSON lines
  summary.py         what a run measured (RunResult) and the summary it prints and logs
  profiling.py       NVTX ranges and a step-window profiler (nsys on CUDA, torch.profiler on CPU)
  tb.py              TensorBoard scalars from rank 0, where tensorboard is installed
  gpu_check.py       `make gpu-check`: this machine's GPUs measured with the trainer
  bench_allreduce.py all-reduce bandwidth, printed like nccl-tests' all_reduce_perf
"""
