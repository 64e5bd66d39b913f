"""Stops the local Ray processes of one `--engine ray` job when its driver ends, however it ends (SIGKILL included).

Run by RayTaskflowPool as `python _ray_reaper.py DRIVER_PID` (as a file, so it starts without importing torch),
in its own session, with a pipe from the driver on stdin. While the driver lives it records the driver's
descendants (Ray's GCS, raylet, and the raylet's DashboardAgent and RuntimeEnvAgent); once the pipe closes or the
driver is gone it kills those still running. Ray's own fate sharing stops the GCS and raylet with a killed driver,
but not the agents: they were left behind with parent PID 1. Only processes this job started are touched (each
checked by PID and start time), never another Ray on the machine.
"""

from __future__ import annotations

import os
import select
import signal
import sys

import psutil

POLL_S = 0.2


def main(driver_pid: int) -> None:
    for sig in (
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGTERM,
    ):  # a Ctrl-C meant for the job must not skip cleanup
        signal.signal(sig, signal.SIG_IGN)
    me = os.getpid()
    seen: dict[int, float] = {}
    try:
        driver = psutil.Process(driver_pid)
        while True:
            for child in driver.children(recursive=True):
                if child.pid != me:
                    try:
                        seen.setdefault(child.pid, child.create_time())
                    except psutil.NoSuchProcess:
                        pass
            if not driver.is_running() or driver.status() == psutil.STATUS_ZOMBIE:
                break
            ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
            if ready and not os.read(sys.stdin.fileno(), 4096):
                break  # the driver closed the pipe (close()) or died
    except psutil.NoSuchProcess:
        pass
    left = []
    for pid, started in seen.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            continue
    for process in left:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=10)


if __name__ == "__main__":
    main(int(sys.argv[1]))
