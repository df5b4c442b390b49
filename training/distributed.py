"""Runs over many hosts: one process per host, every process running the same program on one global mesh.

In a training script::

    from platonic_rl.training import distributed
    distributed.initialize()                       # before any other JAX call; a no-op for one process
    mesh = distributed.data_mesh()                 # every device of every process, axis "data"
    train = jax.jit(make_train(agent_config, env, loop_config, mesh=mesh))
    agent, metrics = train(distributed.replicated(jax.random.PRNGKey(0), mesh))
    if jax.process_index() == 0: ...               # save or print once

How the processes find each other (:func:`initialize`):

* **TPU pods, SLURM, Open MPI**: nothing to set: ``jax.distributed.initialize()`` detects the cluster. Run the
  same command on every host of the pod, e.g. ``gcloud compute tpus tpu-vm ssh NAME --worker=all --command
  "python my_train.py"``.
* **Anywhere else** (GPU hosts, or several processes on one machine): set ``PLATONIC_RL_COORDINATOR``
  (``host:port`` of process 0), ``PLATONIC_RL_NUM_PROCESSES`` and ``PLATONIC_RL_PROCESS_ID`` in each process's
  environment, or launch them all on this machine with
  ``python -m platonic_rl.training.distributed --processes 2 -- python my_train.py`` (which sets them).
  On CPU the processes talk through gloo collectives (JAX's default for CPU).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import jax
import numpy as np

ENV_COORDINATOR = "PLATONIC_RL_COORDINATOR"
ENV_NUM_PROCESSES = "PLATONIC_RL_NUM_PROCESSES"
ENV_PROCESS_ID = "PLATONIC_RL_PROCESS_ID"


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               auto: bool = False) -> None:
    """Join the run's processes: from the arguments, else from the ``PLATONIC_RL_*`` environment variables,
    else (``auto``: on TPU pods, SLURM, Open MPI) ``jax.distributed.initialize()``'s own detection. Without any
    of them this is a single-process run and nothing happens."""
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR)
    if coordinator is None:
        if auto:
            jax.distributed.initialize()
        return
    try:
        num_processes = int(num_processes if num_processes is not None else os.environ[ENV_NUM_PROCESSES])
        process_id = int(process_id if process_id is not None else os.environ[ENV_PROCESS_ID])
    except KeyError as missing:
        raise ValueError(f"distributed.initialize: {ENV_COORDINATOR} is set but {missing} is not (set all three, "
                         "or launch with python -m platonic_rl.training.distributed)") from None
    if not 0 <= process_id < num_processes:
        raise ValueError(f"distributed.initialize: process_id must be in [0, {num_processes}), got {process_id}")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def data_mesh(devices=None):
    """A one-axis mesh named ``"data"`` over ``devices`` (default: every device of every process)."""
    from jax.sharding import Mesh

    return Mesh(np.asarray(devices if devices is not None else jax.devices()), ("data",))


def replicated(tree, mesh):
    """``tree`` (the same host values in every process) as global arrays replicated over ``mesh``."""
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding,
                                                               lambda index: np.asarray(x)[index]), tree)


def local_values(tree):
    """NumPy values of replicated global arrays, read from this process's first shard."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) else x, tree)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(num_processes: int, command: list[str], env: dict | None = None, timeout: float | None = None
           ) -> list[subprocess.CompletedProcess]:
    """Run ``command`` as ``num_processes`` local processes of one distributed run (the ``PLATONIC_RL_*``
    variables set; output captured). Returns their completed processes, in process order."""
    if num_processes < 1:
        raise ValueError(f"launch: num_processes must be >= 1, got {num_processes}")
    if not command:
        raise ValueError("launch: command is empty")
    coordinator = f"localhost:{_free_port()}"
    procs = []
    for i in range(num_processes):
        process_env = dict(os.environ if env is None else env, **{
            ENV_COORDINATOR: coordinator, ENV_NUM_PROCESSES: str(num_processes), ENV_PROCESS_ID: str(i)})
        procs.append(subprocess.Popen(command, env=process_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run a command as N local processes of one distributed JAX run.")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python train.py")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        parser.error("give the command to run after --")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    results = launch(args.processes, args.command)
    for i, r in enumerate(results):
        sys.stdout.write(f"--- process {i} (exit {r.returncode})\n{r.stdout}")
        sys.stderr.write(r.stderr)
    return max(r.returncode for r in results)


if __name__ == "__main__":
    sys.exit(main())
