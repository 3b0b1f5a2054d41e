#!/usr/bin/env bash
# Run a command inside this Slurm allocation with a Ray cluster over all its nodes (verl's multi-node set-up):
# one node -> the command starts Ray itself (verl calls ray.init()); several -> a Ray head on the first node and a
# worker on each other one (srun steps), RAY_ADDRESS exported so that verl's ray.init() joins that cluster.
# Usage: ray_job.sh <command...>
#
# Each Ray node declares the node's GPUs (SLURM_GPUS_ON_NODE, 0 without gres) and CPUs (SLURM_CPUS_ON_NODE);
# RAY_NUM_GPUS / RAY_NUM_CPUS override both (logical resources: verl's CPU backend asks Ray for one GPU).
# RAY_START_TIMEOUT_S (default 120) bounds the wait for the head and for every worker to join.
set -euo pipefail
nodes=${SLURM_JOB_NUM_NODES:-1}
if [ "$nodes" -le 1 ]; then
  exec "$@"
fi

mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${hosts[0]}
port=${RAY_PORT:-6379}
gpus=${RAY_NUM_GPUS:-${SLURM_GPUS_ON_NODE:-0}}
cpus=${RAY_NUM_CPUS:-${SLURM_CPUS_ON_NODE:-1}}
timeout_s=${RAY_START_TIMEOUT_S:-120}
# --overlap: this script usually runs inside a job step that holds the node's CPUs (the Slurm executor starts each
# job with `srun -n1`); without it the Ray steps would wait for that step to end
step="srun --overlap --nodes=1 --ntasks=1"
# the head's first non-loopback address (`hostname --ip-address` gives 127.0.x.1 where /etc/hosts maps the name so)
head_ip=$($step -w "$head_node" hostname -I | awk '{print $1}')
export RAY_ADDRESS="$head_ip:$port"
# Ray authenticates its nodes and clients with a token: one per job, passed to every Ray process and to the
# command through the environment (srun exports it), so that no node needs the user's ~/.ray/auth_token
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}
export RAY_AUTH_TOKEN

ray_steps=()
cleanup() {
  status=$?
  trap - EXIT INT TERM
  ray stop --force >/dev/null 2>&1 || true
  for pid in "${ray_steps[@]}"; do kill "$pid" 2>/dev/null || true; done  # ends the srun steps and their Ray nodes
  wait 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT INT TERM

# Ray's nodes that are alive, as `ray status` lists them (one "1 node_<id>" line each under Active).
alive_nodes() { ray status --address="$RAY_ADDRESS" 2>/dev/null | grep -cE '^ +1 node_' || true; }

wait_for_nodes() {  # <count> <what>: until the cluster has <count> nodes, or fail naming <what>
  local deadline=$((SECONDS + timeout_s))
  until [ "$(alive_nodes)" -ge "$1" ]; do
    for pid in "${ray_steps[@]}"; do
      kill -0 "$pid" 2>/dev/null || { echo "ray_job.sh: a Ray step exited while waiting for $2" >&2; exit 1; }
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "ray_job.sh: $2 not up after ${timeout_s}s ($(alive_nodes) of $1 nodes)" >&2
      exit 1
    fi
    sleep 1
  done
}

$step -w "$head_node" ray start --head --node-ip-address="$head_ip" --port="$port" \
  --num-gpus="$gpus" --num-cpus="$cpus" --block &
ray_steps+=($!)
wait_for_nodes 1 "the Ray head on $head_node"
for node in "${hosts[@]:1}"; do
  $step -w "$node" ray start --address="$RAY_ADDRESS" --num-gpus="$gpus" --num-cpus="$cpus" --block &
  ray_steps+=($!)
done
wait_for_nodes "$nodes" "the Ray workers on ${hosts[*]:1}"
echo "ray_job.sh: Ray cluster at $RAY_ADDRESS with $nodes nodes (${hosts[*]}), $gpus GPUs and $cpus CPUs each" >&2
"$@"
