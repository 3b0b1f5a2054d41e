"""A throwaway Slurm cluster on this machine, for the cluster tests (`make test-cluster`).

Debian's Slurm (22.05) with accounting: a private munged, a private MariaDB, slurmdbd, slurmctld and one slurmd per
node, all on loopback and under one state directory; Debian's build runs several slurmd on one host. Nodes of a
GPU partition get GPU gres backed by fake character devices (Slurm drops file-less GPUs). Everything the cluster
starts is stopped by `stop()`, which a `with LocalSlurm(...)` block calls also when its body fails.

From a shell (the exports make sbatch, squeue, sacct talk to it):
    python tests/cluster/local_slurm.py start /tmp/slurm-state   # prints the environment to export
    python tests/cluster/local_slurm.py stop /tmp/slurm-state
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# tests/ holds the shared helper; under pytest it is on the path already, run as a script it is not
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from debian_packages import ensure_debian_packages  # noqa: E402

PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
BINARIES = ("slurmctld", "slurmd", "slurmdbd", "munged", "mungekey", "mariadbd", "mariadb-install-db", "sbatch",
            "sacctmgr")
ACCOUNT = "dara"
CLUSTER_NAME = "daratest"
# Slurm's client tools inside jobs: the Slurm executor's job-step helper (snakemake-executor-plugin-slurm-jobstep
# 0.6.1) drops every SLURM_* variable, SLURM_CONF included, before its nested srun; a cluster whose config is not at
# the built-in path needs these shims (first in PATH, exported into jobs by sbatch) to find its config again.
CLIENT_SHIMS = ("srun", "sbatch", "scontrol", "squeue", "sacct", "scancel", "sinfo")


@dataclass(frozen=True)
class Partition:
    """Nodes `<prefix>1..<prefix>N` of one shape, all in partition `name` (several groups may share a partition)."""

    name: str
    prefix: str
    nodes: int
    cpus: int
    memory_mb: int
    gpus: int = 0
    gpu_type: str = ""
    default: bool = False

    def node_names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.nodes + 1)]


def ensure_packages() -> None:
    """Install the Debian packages when a binary is missing (idempotent: nothing runs when all are there)."""
    ensure_debian_packages(BINARIES, PACKAGES, "the local Slurm cluster")


def free_ports(count: int) -> list[int]:
    """Ports free on loopback now (held open together, so that they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class LocalSlurm:
    state_dir: Path
    partitions: tuple[Partition, ...]
    start_timeout_s: float = 60.0
    pids: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        names = [node for partition in self.partitions for node in partition.node_names()]
        if len(set(names)) != len(names):
            raise ValueError(f"node names repeat across partitions: {names}")

    # -- paths -------------------------------------------------------------------------------------------------
    @property
    def slurm_conf(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge" / "munge.socket"

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this cluster (merged into os.environ by callers)."""
        return {"SLURM_CONF": str(self.slurm_conf), "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}

    def run(self, *command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        result = subprocess.run(list(command), env={**os.environ, **self.env()}, capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    # -- start / stop ------------------------------------------------------------------------------------------
    def __enter__(self) -> "LocalSlurm":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        ensure_packages()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        for sub in ("etc", "munge", "db", "ctld", "slurmd", "log", "dev", "bin", "run"):
            (self.state_dir / sub).mkdir(parents=True)
        # munged refuses a socket directory others can write to, and reads the tree above it
        os.chmod(self.state_dir, 0o755)
        os.chmod(self.state_dir / "munge", 0o755)
        ctld_port, dbd_port, db_port, *node_ports = free_ports(3 + sum(p.nodes for p in self.partitions))
        self._write_config(ctld_port, dbd_port, db_port, node_ports)
        self._write_shims()
        self._start_munge()
        self._start_mariadb(db_port)
        self._start("slurmdbd", [sbin("slurmdbd"), "-D"], ready=lambda: self._port_open(dbd_port))
        for command in (["add", "cluster", CLUSTER_NAME], ["add", "account", ACCOUNT, f"cluster={CLUSTER_NAME}"],
                        ["add", "user", "root", f"account={ACCOUNT}", f"cluster={CLUSTER_NAME}"]):
            self.run("sacctmgr", "-i", *command)
        self._start("slurmctld", [sbin("slurmctld"), "-D", "-i"], ready=lambda: self._port_open(ctld_port))
        for partition in self.partitions:
            for node in partition.node_names():
                self._start(f"slurmd-{node}", [sbin("slurmd"), "-D", "-N", node])
        self._wait_nodes_idle()
        self._save_pids()

    def _write_config(self, ctld_port: int, dbd_port: int, db_port: int, node_ports: list[int]) -> None:
        host = socket.gethostname().split(".")[0]
        state = self.state_dir
        lines = [
            f"ClusterName={CLUSTER_NAME}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/slurmd/%n",
            f"SlurmctldPidFile={state}/run/slurmctld.pid", f"SlurmdPidFile={state}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={state}/log/slurmctld.log", f"SlurmdLogFile={state}/log/slurmd-%n.log",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={dbd_port}",
            # the slurmctld <-> slurmdbd link uses this socket; AuthInfo alone does not cover it
            f"AccountingStoragePass={self.munge_socket}",
            "AccountingStorageEnforce=associations",
            "AccountingStoreFlags=job_comment",  # the Slurm executor's comment names each job's rule
            "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
            # without it a job with no --mem takes a node's whole memory and jobs run one at a time
            "DefMemPerCPU=500",
            # nodes register with the shapes written here, not the host's (several nodes share one host)
            "SlurmdParameters=config_overrides", "ReturnToService=2",
            "SchedulerParameters=sched_interval=1", "SchedulerType=sched/backfill",
            "KillWait=5", "InactiveLimit=0", "MinJobAge=600", "MessageTimeout=30",
            "GresTypes=gpu",
        ]
        gres_lines = []
        ports = iter(node_ports)
        partition_nodes: dict[str, list[str]] = {}
        for group in self.partitions:
            for node in group.node_names():
                gres = f" Gres=gpu:{group.gpu_type}:{group.gpus}" if group.gpus else ""
                lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={next(ports)}"
                             f" CPUs={group.cpus} RealMemory={group.memory_mb}{gres} State=UNKNOWN")
                if group.gpus:
                    devices = []
                    for index in range(group.gpus):
                        device = state / "dev" / f"{node}-gpu{index}"
                        os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a character device (/dev/null's)
                        devices.append(str(device))
                    gres_lines.append(f"NodeName={node} Name=gpu Type={group.gpu_type} File={','.join(devices)}")
            partition_nodes.setdefault(group.name, []).extend(group.node_names())
        defaults = {group.name for group in self.partitions if group.default}
        for name, nodes in partition_nodes.items():
            lines.append(f"PartitionName={name} Nodes={','.join(nodes)} Default={'YES' if name in defaults else 'NO'}"
                         " MaxTime=INFINITE State=UP")
        self.slurm_conf.write_text("\n".join(lines) + "\n")
        (state / "etc" / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        dbd_conf = state / "etc" / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo=socket={self.munge_socket}",
            f"DbdHost={host}", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
            f"PidFile={state}/run/slurmdbd.pid", f"LogFile={state}/log/slurmdbd.log",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=root", "StorageLoc=slurm_acct_db",
        ]) + "\n")
        os.chmod(dbd_conf, 0o600)

    def _write_shims(self) -> None:
        for tool in CLIENT_SHIMS:
            search = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if d != str(self.bin_dir))
            real = shutil.which(tool, path=search)
            if real is None:
                raise RuntimeError(f"{tool} is not installed (Debian package slurm-client)")
            shim = self.bin_dir / tool
            shim.write_text(f"#!/bin/sh\nSLURM_CONF={self.slurm_conf} exec {real} \"$@\"\n")
            shim.chmod(0o755)

    def _start_munge(self) -> None:
        key = self.state_dir / "munge" / "munge.key"
        subprocess.run([sbin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        munge = self.state_dir / "munge"
        self._start("munged", [sbin("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={munge}/munged.pid",
                               f"--seed-file={munge}/munged.seed", f"--log-file={self.log_dir}/munged.log"],
                    ready=self.munge_socket.exists)

    def _start_mariadb(self, port: int) -> None:
        data = self.state_dir / "db"
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=normal"], check=True, capture_output=True, timeout=120)
        # a private instance that only slurmdbd on loopback talks to: no grant tables, no password
        self._start("mariadbd", [sbin("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root",
                                 f"--socket={self.state_dir}/run/mariadb.sock", f"--port={port}",
                                 "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve",
                                 f"--pid-file={self.state_dir}/run/mariadbd.pid",
                                 f"--log-error={self.log_dir}/mariadbd.log"],
                    ready=lambda: self._port_open(port))

    def _start(self, name: str, command: list[str], ready=None) -> None:
        log = open(self.log_dir / f"{name}.out", "w")
        process = subprocess.Popen(command, env={**os.environ, **self.env()}, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        self.pids[name] = process.pid
        self._save_pids()
        if ready is None:
            return
        deadline = time.monotonic() + self.start_timeout_s
        while not ready():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} while starting: "
                                   f"{self._tail(self.log_dir / f'{name}.out')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {self.start_timeout_s:.0f} s: "
                                   f"{self._tail(self.log_dir / f'{name}.out')}")
            time.sleep(0.2)

    @staticmethod
    def _tail(path: Path, chars: int = 2000) -> str:
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no output)"

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", port)) == 0

    def _wait_nodes_idle(self) -> None:
        expected = {node for partition in self.partitions for node in partition.node_names()}
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            result = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
            if expected <= set(states) and all(states[node] == "idle" for node in expected):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not idle after {self.start_timeout_s:.0f} s: {states} "
                                   f"{result.stderr.strip()}; slurmctld log: "
                                   f"{self._tail(self.log_dir / 'slurmctld.log')}")
            time.sleep(0.5)

    def _save_pids(self) -> None:
        (self.state_dir / "run" / "pids.json").write_text(json.dumps(self.pids))

    def stop(self) -> None:
        """Cancel every job, then stop the daemons in reverse order of start (SIGTERM, SIGKILL after 15 s)."""
        pid_file = self.state_dir / "run" / "pids.json"
        if not self.pids and pid_file.exists():
            self.pids = json.loads(pid_file.read_text())
        if "slurmctld" in self.pids and _alive(self.pids["slurmctld"]):
            self.run("scancel", "--user=root", check=False, timeout=30)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.run("squeue", "-h", check=False, timeout=30).stdout.strip():
                time.sleep(0.5)
        for pid in reversed(list(self.pids.values())):
            _terminate(pid)
        self.pids.clear()
        if pid_file.exists():
            pid_file.unlink()

    def running(self) -> list[str]:
        """The cluster's daemons that still run (empty after stop())."""
        return [name for name, pid in self.pids.items() if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _terminate(pid: int, wait_s: float = 15.0) -> None:
    """SIGTERM to the process's session (the daemon and what it started), SIGKILL if it outlives wait_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not _alive(pid):
                return
            time.sleep(0.1)


# The shape the cluster tests use: two 1-CPU nodes for CPU jobs (partition `cpu`, the default), and for submission
# checks the study's GPU nodes (partition `gpu`, one node of each GPU model experiments/paper.yaml names: 8 GPUs,
# 128 CPUs, 1 TB, so that a 4- or 8-GPU job with 64 CPUs and 480 GB fits and more does not).
TEST_PARTITIONS = (
    Partition("cpu", "n", nodes=2, cpus=1, memory_mb=16_000, default=True),
    Partition("gpu", "ga", nodes=1, cpus=128, memory_mb=1_000_000, gpus=8, gpu_type="a100_40gb"),
    Partition("gpu", "gb", nodes=1, cpus=128, memory_mb=1_000_000, gpus=8, gpu_type="a100_80gb"),
)


def write_test_profile(profile_dir: Path, partition: str, account: str = ACCOUNT,
                       repo: Path = Path(__file__).resolve().parents[2]) -> Path:
    """The project's Slurm profile with its two site lines set for this cluster, and nothing else changed but the
    executor's first status check (40 s by default; 5 s here, so that short test jobs do not wait on it)."""
    import yaml

    config = yaml.safe_load((repo / "profiles" / "slurm" / "config.yaml").read_text())
    site = config["default-resources"]
    missing = {"slurm_partition", "slurm_account"} - set(site)
    if missing:
        raise ValueError(f"profiles/slurm/config.yaml has no {sorted(missing)} in default-resources")
    site.update(slurm_partition=partition, slurm_account=account)
    config["slurm-init-seconds-before-status-checks"] = 5
    profile_dir.mkdir(parents=True, exist_ok=True)
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return profile_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("state_dir", type=Path)
    args = parser.parse_args(argv)
    cluster = LocalSlurm(args.state_dir, TEST_PARTITIONS)
    if args.action == "start":
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        for key, value in cluster.env().items():
            print(f"export {key}={value}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
