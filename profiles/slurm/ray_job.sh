#!/usr/bin/env bash
# Run a command inside this Slurm allocation with a Ray cluster over all its nodes (verl's multi-node set-up):
# one node -> the command starts Ray itself (verl calls ray.init()); several -> a head here, a worker on each other
# node via srun, RAY_ADDRESS exported so verl's ray.init() joins it. Usage: ray_job.sh <command...>
set -euo pipefail
nodes=${SLURM_JOB_NUM_NODES:-1}
if [ "$nodes" -le 1 ]; then
  exec "$@"
fi
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')
port=${RAY_PORT:-6379}
gpus=${SLURM_GPUS_ON_NODE:-8}
srun --nodes=1 --ntasks=1 -w "$head_node" ray start --head --node-ip-address="$head_ip" --port="$port" \
  --num-gpus="$gpus" --block &
sleep 20
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n +2); do
  srun --nodes=1 --ntasks=1 -w "$node" ray start --address="$head_ip:$port" --num-gpus="$gpus" --block &
done
sleep 20
export RAY_ADDRESS="$head_ip:$port"
trap 'ray stop --force >/dev/null 2>&1 || true' EXIT
"$@"
