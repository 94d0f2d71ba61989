#!/usr/bin/env bash
# Runs one ShardPS job under Open MPI's mpirun: the first P ranks are
# pservers, the other N ranks trainers (trainer id = rank - P).
#
#   mpirun -np 4 --bind-to none -x SHARDPS_MPI_PSERVERS=2 \
#       -x SHARDPS_MPI_DIR=/shared/job1 configs/mpi/shardps_mpi.sh --mode=sync
#
# Each rank runs scripts/cluster/scheduler_launch.py, which the Slurm
# launcher shares; docs/deploy.md ("MPI", "Slurm and MPI") gives the
# SHARDPS_MPI_* variables, the two-app-context form that places the
# pservers, and what happens when a rank fails.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster/scheduler_launch.py" \
  task mpi "$@"
