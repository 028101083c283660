"""Container health checks for the normfree services (exit 0: healthy, 1: not).

    python /opt/normfree/deploy/healthcheck.py api        # the REST API answers /api/health
    python /opt/normfree/deploy/healthcheck.py ray-head   # GCS + raylet run, the Jobs API answers
    python /opt/normfree/deploy/healthcheck.py ray-node   # this node's raylet runs

Why these checks: docker-compose starts the API and the workers only once what they need is
*healthy*, not merely started. A Ray head is useful when its GCS accepts nodes and its Jobs API
accepts studies; a worker is useful while its raylet lives (a container whose raylet crashed
but whose ``ray start --block`` still waits would otherwise look fine). Process checks read
``/proc``, which inside a container shows only that container's processes.

Standard library only and no Ray import: a check runs every few seconds and must stay cheap.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

MODES = ("api", "ray-head", "ray-node")


def running(name: str) -> bool:
    """Whether a process whose executable is called ``name`` runs (in this PID namespace)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv0 = cmdline.read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if Path(argv0).name == name:
            return True
    return False


def http_ok(url: str, *, accept_auth_errors: bool = False, timeout: float = 4.0) -> bool:
    """Whether ``url`` answers 2xx (or 401/403 if ``accept_auth_errors``: up, wants a token)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except urllib.error.HTTPError as exc:
        return accept_auth_errors and exc.code in (401, 403)
    except (urllib.error.URLError, OSError):
        return False


def check(mode: str, *, api_port: int | None = None, dashboard_port: int = 8265) -> bool:
    if mode == "api":
        if api_port is None:
            from normfree.settings import get_settings

            api_port = get_settings().port
        return http_ok(f"http://127.0.0.1:{api_port}/api/health")
    if mode == "ray-node":
        return running("raylet")
    if mode == "ray-head":
        return (
            running("gcs_server")
            and running("raylet")
            and http_ok(f"http://127.0.0.1:{dashboard_port}/api/version", accept_auth_errors=True)
        )
    raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MODES:
        print(f"usage: healthcheck.py {{{'|'.join(MODES)}}}", file=sys.stderr)
        return 2
    healthy = check(argv[0])
    if not healthy:
        print(f"{argv[0]}: unhealthy", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
