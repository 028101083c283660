"""Static validation of docker-compose.yml, the Dockerfile, .dockerignore and the health checks.

No Docker engine runs here, so nothing is built or started; instead every fact the stack relies
on is checked against the code it will run: the services and their health gating, that every
``NORMFREE_*`` variable is a real ``Settings`` field and that the values parse, that every
command a container runs exists (``normfree`` subcommands and options in the click group,
``ray start`` options in Ray's own CLI, health-check modes in the script the image copies), that
ports and addresses agree between services, that caches lie on per-node volumes, and what the
Dockerfile pins. ``docker compose config`` runs as an extra check where the compose plugin
exists (it does not on this machine: only the docker client is installed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import click
import pytest
import yaml

from normfree.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / "deploy" / "env.example"
IMAGE_WORKDIR = PurePosixPath("/opt/normfree")  # WORKDIR in the Dockerfile (checked below)

SERVICES = {"postgres", "ray-head", "ray-worker", "ray-worker-gpu", "api"}
RAY_SERVICES = {"ray-head", "ray-worker", "ray-worker-gpu"}
WORKERS = {"ray-worker", "ray-worker-gpu"}

# ---------------------------------------------------------------------------- interpolation

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$\$")


def _env_example() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def interpolate(value: Any, env: dict[str, str], seen: set[str] | None = None) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$``, recursively."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, seen) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if seen is not None:
            seen.add(name)
        have = env.get(name)
        if op in (":-", "-"):
            return have if have not in (None, "") else arg
        if op in (":?", "?"):
            if have in (None, ""):
                raise KeyError(f"${{{name}}} is required: {arg}")
            return have
        return have or ""

    return _VAR.sub(sub, value)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    """The compose file as Docker would see it with the documented .env (deploy/env.example)."""
    return interpolate(raw, _env_example())


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _argv(command: Any) -> list[str]:
    return list(command) if isinstance(command, list) else shlex.split(command)


# ---------------------------------------------------------------------------- commands


def _resolve_click(group: click.Command, argv: list[str]) -> tuple[click.Command, list[str]]:
    """Walk subcommand names down a click group; return the command and its remaining args."""
    cmd, rest = group, list(argv)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), rest[0])
        assert sub is not None, f"{' '.join(argv)}: no subcommand {rest[0]!r}"
        cmd, rest = sub, rest[1:]
    return cmd, rest


def _check_options(cmd: click.Command, args: list[str], where: str) -> None:
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for a in args:
        if a.startswith("--"):
            assert a.split("=", 1)[0] in known, f"{where}: {cmd.name} has no option {a}"


def _healthcheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nf_healthcheck", ROOT / "deploy/healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_command(argv: list[str], where: str) -> None:
    """Assert that a command a container runs exists, with every option it passes."""
    if argv and argv[0] == "CMD":
        argv = argv[1:]
    if argv and argv[0] == "CMD-SHELL":
        argv = shlex.split(argv[1])
    assert argv, f"{where}: empty command"
    exe = argv[0]
    if exe == "normfree":
        from normfree.cli import main

        cmd, rest = _resolve_click(main, argv[1:])
        assert not isinstance(cmd, click.Group), f"{where}: {argv} names a group, not a command"
        _check_options(cmd, rest, where)
    elif exe == "ray":
        from ray.scripts.scripts import cli as ray_cli

        assert (Path(sys.executable).parent / "ray").exists() or shutil.which("ray")
        cmd, rest = _resolve_click(ray_cli, argv[1:])
        _check_options(cmd, rest, where)
    elif exe == "python":
        script = PurePosixPath(argv[1])
        assert script.is_relative_to(IMAGE_WORKDIR), f"{where}: {script} is not in the image"
        local = ROOT / script.relative_to(IMAGE_WORKDIR)
        assert local.is_file(), f"{where}: {local} does not exist"
        if local.name == "healthcheck.py":
            assert argv[2:] and argv[2] in _healthcheck_module().MODES, f"{where}: {argv}"
    elif exe == "pg_isready":  # ships with the postgres image
        assert "-U" in argv and "-d" in argv
    else:
        raise AssertionError(f"{where}: unknown executable {exe!r}")


# ---------------------------------------------------------------------------- compose


def test_services_healthchecks_and_gating(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        hc = svc.get("healthcheck")
        assert hc and hc.get("test"), f"{name} has no healthcheck"
        check_command(_argv(hc["test"]), f"{name}.healthcheck")
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}: {cond}"
            assert services[dep].get("healthcheck"), f"{name} waits on {dep}, which has none"
    needs = {
        "ray-head": {"postgres"},
        "ray-worker": {"ray-head", "postgres"},
        "ray-worker-gpu": {"ray-head", "postgres"},
        "api": {"ray-head", "postgres"},
    }
    for name, deps in needs.items():
        assert set(services[name]["depends_on"]) == deps
    assert "pg_isready" in " ".join(_argv(services["postgres"]["healthcheck"]["test"]))
    assert services["ray-head"]["healthcheck"]["test"][-1] == "ray-head"
    for w in WORKERS:
        assert services[w]["healthcheck"]["test"][-1] == "ray-node"


def test_every_command_exists(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if "command" in svc:
            check_command(_argv(svc["command"]), f"{name}.command")
    head = _argv(compose["services"]["ray-head"]["command"])
    assert head[:2] == ["ray", "start"] and "--head" in head and "--block" in head
    for w in WORKERS:
        argv = _argv(compose["services"][w]["command"])
        assert argv[:2] == ["ray", "start"] and "--block" in argv and "--head" not in argv
    api = _argv(compose["services"]["api"]["command"])
    assert api[:2] == ["normfree", "serve"] and api[api.index("--host") + 1] == "0.0.0.0"


def _flag(argv: list[str], name: str) -> str:
    for i, a in enumerate(argv):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name:
            return argv[i + 1]
    raise AssertionError(f"{name} not in {argv}")


def test_environment_is_settings_and_parses(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {f"NORMFREE_{k.upper()}" for k in Settings.model_fields}
    services = compose["services"]
    for name, svc in services.items():
        env = _env(svc)
        for key in env:
            if key.startswith("NORMFREE_"):
                assert key in fields, f"{name}: {key} is not a Settings field"
        if name == "postgres":
            continue
        # The values parse as Settings would read them inside the container.
        for key in [k for k in os.environ if k.startswith("NORMFREE_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings()
        assert settings.database_url.startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in settings.database_url
        assert settings.kernel_cache == Path("/var/lib/normfree/kernels")
        # Token auth on, one token for every Ray process and client.
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"]
    head = _argv(services["ray-head"]["command"])
    gcs_port = _flag(head, "--port")
    dash_port = _flag(head, "--dashboard-port")
    for name in SERVICES - {"postgres"}:
        env = _env(services[name])
        assert env["NORMFREE_RAY_ADDRESS"] == f"ray-head:{gcs_port}"
        assert env["NORMFREE_RAY_JOBS_ADDRESS"] == f"http://ray-head:{dash_port}"
    for w in WORKERS:
        assert _flag(_argv(services[w]["command"]), "--address") == f"ray-head:{gcs_port}"
    assert _flag(head, "--num-cpus") == "0"  # drivers live on the head; trials on workers


def test_required_variables_are_documented(raw: dict[str, Any]) -> None:
    text = COMPOSE_FILE.read_text()
    documented = _env_example()
    required = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?", text))
    assert required == {"POSTGRES_PASSWORD", "RAY_AUTH_TOKEN"}
    assert required <= set(documented)
    # Without them compose must refuse to render (no silent default password or token).
    with pytest.raises(KeyError, match=r"POSTGRES_PASSWORD|RAY_AUTH_TOKEN"):
        interpolate(raw, {})
    used: set[str] = set()
    interpolate(raw, documented, used)
    undocumented = {v for v in used if v not in documented and f"${{{v}:-" not in text}
    assert not undocumented, f"variables without default or documentation: {undocumented}"


def test_ports(compose: dict[str, Any]) -> None:
    s = compose["services"]

    def published(name: str) -> list[tuple[str, str, str]]:
        out = []
        for p in s[name].get("ports", []):
            parts = str(p).split(":")
            host_ip = parts[0] if len(parts) == 3 else ""
            out.append((host_ip, parts[-2], parts[-1]))
        return out

    ((ip, host, container),) = published("api")
    api = _argv(s["api"]["command"])
    assert container == _flag(api, "--port") == _env(s["api"])["NORMFREE_PORT"] == "8000"
    assert host == "8000" and ip == ""
    ((ip, _, container),) = published("ray-head")
    assert ip == "127.0.0.1" and container == _flag(
        _argv(s["ray-head"]["command"]), "--dashboard-port"
    )
    ((ip, _, container),) = published("postgres")
    assert ip == "127.0.0.1" and container == "5432"
    for w in WORKERS:
        assert not s[w].get("ports"), "workers must scale: no fixed host ports"


def test_volumes_and_per_node_caches(compose: dict[str, Any]) -> None:
    s = compose["services"]
    declared = set(compose["volumes"])

    def mounts(name: str) -> dict[str, str]:
        out = {}
        for v in s[name].get("volumes", []):
            src, dst = str(v).split(":")[:2]
            out[dst] = src
        return out

    assert mounts("postgres")["/var/lib/postgresql/data"] in declared
    cache_volumes = set()
    for name in RAY_SERVICES | {"api"}:
        env = _env(s[name])
        root = PurePosixPath(env["NORMFREE_KERNEL_CACHE"]).parent
        volume = mounts(name).get(str(root))
        assert volume in declared, f"{name}: the cache root {root} is not on a named volume"
        # Triton's binaries and torch.compile's share the node's volume with our sources.
        assert PurePosixPath(env["TRITON_CACHE_DIR"]).is_relative_to(root)
        assert PurePosixPath(env["TORCHINDUCTOR_CACHE_DIR"]).is_relative_to(root)
        cache_volumes.add((name, volume))
    by = dict(cache_volumes)
    assert by["ray-worker"] != by["ray-worker-gpu"] != by["ray-head"]
    # Object stores live in /dev/shm: it must hold the configured object store.
    for name in RAY_SERVICES:
        store = int(_flag(_argv(s[name]["command"]), "--object-store-memory"))
        shm = str(s[name]["shm_size"])
        assert shm.endswith("gb") and int(shm[:-2]) * 1024**3 > store, name


def test_scaling_and_gpu_profile(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert int(s["ray-worker"]["deploy"]["replicas"]) >= 1
    assert "container_name" not in s["ray-worker"]  # --scale needs generated names
    gpu = s["ray-worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert str(device["count"]) == _flag(_argv(gpu["command"]), "--num-gpus") == "1"
    assert "cu" in gpu["build"]["args"]["TORCH_INDEX_URL"].rsplit("/", 1)[1]
    assert s["ray-worker"]["build"]["args"]["TORCH_INDEX_URL"].endswith("/cpu")
    assert _flag(_argv(s["ray-worker"]["command"]), "--num-gpus") == "0"
    for name in SERVICES - {"ray-worker-gpu"}:
        assert not s[name].get("profiles"), f"{name} must start without a profile"


@pytest.mark.skipif(
    subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode
    != 0
    if shutil.which("docker")
    else True,
    reason="the docker compose plugin is not installed here (only the docker client is)",
)
def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    env = {**_env_example(), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    res = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "--profile", "gpu", "config", "-q"],
        capture_output=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert res.returncode == 0, res.stderr.decode()


# ---------------------------------------------------------------------------- Dockerfile


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        buf += " " + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def _args(instrs: list[tuple[str, str]]) -> dict[str, str]:
    return dict(a.split("=", 1) for k, a in instrs if k == "ARG" and "=" in a)


def test_dockerfile() -> None:
    instrs = _instructions()
    args = _args(instrs)
    kinds = [k for k, _ in instrs]
    (base,) = [a for k, a in instrs if k == "FROM"]
    assert interpolate(base, args) == "python:3.11-slim"
    # torch pinned as the Makefile pins it; the CPU wheel index unless told otherwise.
    pin = re.search(r"TORCH_PIN \?= torch==(\S+)", (ROOT / "Makefile").read_text())
    assert pin and args["TORCH_VERSION"] == pin.group(1)
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    runs = [a for k, a in instrs if k == "RUN"]
    torch_runs = [r for r in runs if 'torch==${TORCH_VERSION}"' in r]
    assert torch_runs and '--index-url "${TORCH_INDEX_URL}"' in torch_runs[0]
    assert runs.index(torch_runs[0]) < next(i for i, r in enumerate(runs) if "pip install ." in r)
    # Non-root at run time.
    users = [a for k, a in instrs if k == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert kinds.index("USER") > max(i for i, k in enumerate(kinds) if k == "RUN")
    # WORKDIR is where the compose health checks expect the deploy scripts.
    assert [a for k, a in instrs if k == "WORKDIR"] == [str(IMAGE_WORKDIR)]
    # COPY sources exist and reach the build context.
    ignored = _dockerignore()
    for k, a in instrs:
        if k == "COPY":
            *sources, _ = a.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: missing"
                assert not _is_ignored(src, ignored), f"COPY {src}: excluded by .dockerignore"
    # The default command and the image health check exist.
    (cmd,) = [a for k, a in instrs if k == "CMD"]
    check_command(yaml.safe_load(cmd), "Dockerfile CMD")
    (hc,) = [a for k, a in instrs if k == "HEALTHCHECK"]
    check_command(yaml.safe_load(hc[hc.index("CMD") + 3 :].strip()), "Dockerfile HEALTHCHECK")
    env = " ".join(a for k, a in instrs if k == "ENV")
    assert "NORMFREE_KERNEL_CACHE=/var/lib/normfree/kernels" in env


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def _is_ignored(path: str, patterns: list[str]) -> bool:
    return any(fnmatch(path, p) or fnmatch(path, p.removeprefix("**/")) for p in patterns)


def test_dockerignore_keeps_the_context_small_and_complete() -> None:
    patterns = _dockerignore()
    for path in (".venv", ".git", "normfree.db", "normfree.db-wal", ".env", "tests"):
        assert _is_ignored(path, patterns), f"{path} would be sent to the build context"
    for path in ("normfree", "deploy", "pyproject.toml", "README.md"):
        assert not _is_ignored(path, patterns), f"{path} is needed by the image"


# ---------------------------------------------------------------------------- health checks


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path in ("/ok", "/api/health") else 401)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_script_really_checks(http_server: str) -> None:
    hc = _healthcheck_module()
    assert hc.http_ok(f"{http_server}/ok")
    assert not hc.http_ok(f"{http_server}/auth")  # alive but refusing: not healthy for the API
    assert hc.http_ok(f"{http_server}/auth", accept_auth_errors=True)  # Ray's Jobs API with auth
    closed = http_server.rsplit(":", 1)[0] + ":1"
    assert not hc.http_ok(f"{closed}/ok", timeout=1)
    assert hc.running(Path(sys.executable).name) or hc.running("python3") or hc.running("python")
    assert not hc.running("no-such-process-normfree")
    assert hc.check("api", api_port=int(http_server.rsplit(":", 1)[1]))
    assert not hc.check("api", api_port=1)
    assert hc.main(["bogus"]) == 2
