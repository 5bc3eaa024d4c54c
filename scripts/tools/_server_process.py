"""The service (scripts/serve.py) as a separate process on a free loopback port: the harness of the load
benchmark (benchmark_serving.py, beside it) and of the service's tests (tests/serving, which pytest's
`pythonpath` lets import it). Not a script, and not in the package: it runs this checkout's scripts/serve.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = CHECKOUT / "scripts" / "serve.py"


def free_port() -> int:
    """A loopback port free at the moment of asking."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """scripts/serve.py serving `model` on 127.0.0.1 with `flags`, its output in `log`; `threads` sets the
    torch threads it decodes with (OMP_NUM_THREADS)."""

    def __init__(self, model: str | os.PathLike, log: Path, flags: tuple[str, ...] = (), threads: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        command = [sys.executable, str(SERVE_SCRIPT), str(model), "--port", str(self.port), *flags]
        # This checkout's package, not an installed copy elsewhere.
        environment = {
            **os.environ,
            "PYTHONPATH": str(CHECKOUT),
            "OMP_NUM_THREADS": str(threads),
        }
        with self.log.open("w") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)

    def wait_until_ready(self, timeout: float) -> None:
        """Return once /ready answers 200; an AssertionError with the log if the process ends or time runs
        out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server ended ({self.process.returncode}):\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):  # not listening yet, or 503 while loading
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready after {timeout:.0f} s:\n{self.log.read_text()}")

    def cpu_seconds(self) -> float | None:
        """The server's user + system CPU time so far, from /proc (None where there is none)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15

    def batch_lines(self) -> list[str]:
        """The log's lines of one batch each."""
        return [line for line in self.log.read_text().splitlines() if "batch: " in line]

    def stop(self) -> int:
        """SIGTERM, then the exit status once every accepted request is answered."""
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=60)
