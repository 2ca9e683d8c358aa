"""Where a figure comes from: code, interpreter, libraries, machine and settings, printed first.

ephpm-lessons §6.3 A: a number without its artifact and environment cannot be compared. The
working tree may hold other engineers' uncommitted files, so besides the commit we record which
files under ``src/`` and ``examples/`` differ from it and a hash of what actually ran.
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.server import REPO

__all__ = ["cpu_model", "provenance"]

_PACKAGES = ("pyvia", "uvloop", "httptools", "orjson", "Jinja2", "MarkupSafe", "brotli", "zstandard")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.rstrip()


def _code_hash(roots: tuple[Path, ...]) -> str:
    """sha256 over the framework and example sources as they are on disk (committed or not)."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".html") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cpu_model() -> str:
    """``model name`` plus family/model/stepping from /proc/cpuinfo (the name alone says little in a VM)."""
    info: dict[str, str] = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, sep, value = line.partition(":")
            if sep and key.strip() not in info:
                info[key.strip()] = value.strip()
            if not line.strip() and info:
                break
    return (
        f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')}, "
        f"stepping {info.get('stepping', '?')}, {info.get('cpu MHz', '?')} MHz)"
    )


def _versions() -> dict[str, str]:
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def cpu_quota() -> str:
    """The cgroup's CPU quota (``cpu.max``: "max 100000" is none), as ephpm-lessons §6.3 A asks."""
    try:
        return Path("/sys/fs/cgroup/cpu.max").read_text().strip()
    except OSError:
        return "none (no cgroup v2 cpu.max)"


def _mem_total_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def provenance(command: str, settings: dict[str, Any], server_command: list[str]) -> dict[str, Any]:
    """Everything needed to say what was measured and where."""
    changed = [line for line in _git("status", "--porcelain", "--", "src", "examples").splitlines() if line]
    src = settings.get("pyvia_src")
    return {
        "pyvia_src": None
        if not src
        else {"path": str(Path(src).resolve()), "code_sha256_16": _code_hash((Path(src) / "pyvia",))},
        "type": "provenance",
        "command": command,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_sha": _git("rev-parse", "HEAD"),
        "git_uncommitted_in_src": changed,
        "code_sha256_16": _code_hash((REPO / "src" / "pyvia", REPO / "examples")),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "packages": _versions(),
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "cpu_quota": cpu_quota(),
        "mem_total_mb": _mem_total_mb(),
        "kernel": platform.release(),
        "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
        "ulimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "server_cpu": "taskset -c 1",
        "client_cpu": sorted(os.sched_getaffinity(0)),
        "server_command": server_command,
        "pyvia_toml": _file_hash(REPO / "pyvia.toml"),
        "settings": settings,
    }


def _file_hash(path: Path) -> str | None:
    """sha256 (16 hex) of a file that would configure the server, or None when there is none."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else None


def print_provenance(record: dict[str, Any]) -> None:
    packages = ", ".join(f"{k} {v}" for k, v in record["packages"].items())
    changed = record["git_uncommitted_in_src"]
    print(f"# pyvia bench {record['command']}  {record['time']}")
    print(
        f"#   git {record['git_sha'][:12]}, code sha256 {record['code_sha256_16']}"
        f"{f', {len(changed)} uncommitted path(s) under src/ examples/' if changed else ''}"
    )
    if record["pyvia_src"]:
        print(
            f"#   pyvia served from {record['pyvia_src']['path']} (code sha256 "
            f"{record['pyvia_src']['code_sha256_16']}), not from this checkout"
        )
    print(f"#   {record['python']}; {packages}")
    print(
        f"#   CPU {record['cpu']}; nproc {record['nproc']}, cgroup cpu.max {record.get('cpu_quota', '?')}; "
        f"{record['mem_total_mb']} MB; kernel {record['kernel']}"
    )
    print(
        f"#   load average {' '.join(record['loadavg_at_start'])}; ulimit -n {record['ulimit_nofile']}; "
        f"server {record['server_cpu']}, client on CPU {record['client_cpu']}"
    )
    print(f"#   server: {' '.join(record['server_command'])[:160]}")
    print(f"#   settings: {record['settings']}")
    if record["pyvia_toml"]:
        print(f"#   NOTE: {REPO / 'pyvia.toml'} (sha256 {record['pyvia_toml']}) configures the server too")
