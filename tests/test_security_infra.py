"""Deployment hardening (issue 17: the Prefect server, worker image, deployment findings):
infra/compose.yaml and every Kubernetes manifest under infra/k8s/ are validated by real
validators (check-jsonschema's compose-spec schema, kubernetes-validate), and the settings
that keep pull-request code away from secrets, privileges and the network are checked where
they are declared, and run where this machine can run them (the init script against a real
PostgreSQL, the secret entry point, the job's capabilities under setpriv, the worker image's
build context through docker-py's .dockerignore matcher)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import psycopg
import pytest
import yaml
from k8s_manifests import K8S, KUBERNETES, documents, job_templates, kustomizations
from pg_roles import set_passwords

from kernelwatch.harness.build.stage import MAX_WORKERS
from kernelwatch.harness.isolation.sandbox import SCRATCH_ENV

ROOT = Path(__file__).parent.parent
INFRA = ROOT / "infra"
COMPOSE = INFRA / "compose.yaml"
CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")
#: What the sandbox needs of a root worker (harness/isolation/sandbox.py and jail.py): chown its
#: directory to the sandbox user, drop to that user, end a hung child, remove what it wrote.
SANDBOX_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _validate_compose(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


# --- real validators ---


def test_compose_file_is_valid_for_the_compose_spec(tmp_path):
    proc = _validate_compose(COMPOSE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = _compose()
    broken["services"]["grafana"]["cap_add"] = "CHOWN"  # a string where a list belongs
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(broken))
    assert _validate_compose(tmp_path / "compose.yaml").returncode != 0


@pytest.mark.parametrize(("name", "manifest"), sorted(documents().items()))
def test_every_kubernetes_manifest_is_valid_for_kubernetes(name, manifest):
    assert kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def test_kubernetes_validation_refuses_a_broken_manifest():
    job = documents()[next(iter(job_templates()))]
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"runAsUser": "root"}
    with pytest.raises(kubernetes_validate.ValidationError, match="is not of type"):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)


def test_every_manifest_file_is_applied_by_a_kustomization():
    listed = set()
    for directory, kustomization in kustomizations().items():
        for entry in kustomization.get("resources", []):
            assert (directory / entry).is_file(), entry
            listed.add(directory / entry)
        for generator in kustomization.get("configMapGenerator", []):
            for entry in generator.get("files", []):
                assert (directory / entry).is_file(), entry
                listed.add(directory / entry)
    manifests = [p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml", ".json")]
    orphans = {p for p in manifests if p.name != "kustomization.yaml"} - listed
    assert not orphans, sorted(str(p) for p in orphans)


# --- the Prefect server ---


def test_prefect_server_requires_authentication_and_publishes_on_loopback_only():
    services = _compose()["services"]
    server = services["prefect-server"]
    assert server["environment"]["PREFECT_SERVER_API_AUTH_STRING_FILE"] == (
        "/run/secrets/prefect_auth_string"
    )
    assert "prefect_auth_string" in server["secrets"]
    worker = services["worker-h100"]["environment"]
    assert worker["PREFECT_API_AUTH_STRING_FILE"] == "/run/secrets/prefect_auth_string"
    for name, doc in documents().items():
        if doc["kind"] == "Deployment":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            # A file of the Secret's volume, read into the variable by the worker's script.
            secret_dir = _secret_mounts(doc["spec"]["template"]["spec"], container)
            path = Path(env["PREFECT_API_AUTH_STRING_FILE"])
            assert str(path.parent) in secret_dir, name
            assert (
                'PREFECT_API_AUTH_STRING="$(cat "$PREFECT_API_AUTH_STRING_FILE")"'
                in (container["args"][0])
            ), name


def test_grafana_and_prefect_publish_on_loopback_only():
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    assert _compose()["networks"]["store"]["internal"] is True
    assert _compose()["services"]["postgres"]["networks"] == ["store"]


# --- the worker image ---


def test_worker_image_context_excludes_env_secrets_and_config(tmp_path):
    from docker.utils.build import exclude_paths

    ignore_files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.dockerignore"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # One place decides what an image may hold: a Dockerfile-specific ignore file would win
    # over it for that Dockerfile.
    assert ignore_files == [".dockerignore"], ignore_files
    planted = ["infra/.env", "infra/secrets/db_owner_password", "infra/config/kernelwatch.toml",
               ".env", "harness/isolation/kernel_child.py",
               "infra/docker/env-from-secrets.sh"]  # fmt: skip
    for relative in planted:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    context = set(exclude_paths(str(tmp_path), patterns))
    assert {"harness/isolation/kernel_child.py", "infra/docker/env-from-secrets.sh"} <= context
    for secret in planted[:4]:
        assert secret not in context, secret
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    assert "safe.directory" not in dockerfile


# --- secrets from files ---


def test_secrets_come_from_files_not_the_environment():
    compose = _compose()
    declared = compose["secrets"]
    for name, service in compose["services"].items():
        env = service.get("environment", {})
        assert not re.search(r"\$\{[^}]*(PASSW|SECRET|TOKEN|WEBHOOK)", json.dumps(env)), name
        assert not re.search(r"://[^/@\s]+:[^/@\s]+@", json.dumps(env)), name  # user:pw@
        for variable, value in env.items():
            if variable.endswith("_FILE"):
                secret = value.removeprefix("/run/secrets/")
                assert secret in declared and secret in service["secrets"], (name, variable)
    for secret in declared.values():
        assert secret["file"].startswith("./secrets/")


def test_env_from_secrets_sets_each_variable_from_its_file(tmp_path):
    script = INFRA / "docker" / "env-from-secrets.sh"
    (tmp_path / "pw").write_text("s3cret\n")
    base = {"PATH": os.environ["PATH"]}
    proc = subprocess.run(
        ["sh", str(script), "env"],
        env={**base, "PGPASSWORD_FILE": str(tmp_path / "pw"), "GF_X__FILE": str(tmp_path / "pw")},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert env["PGPASSWORD"] == "s3cret" and "PGPASSWORD_FILE" not in env
    assert env["GF_X__FILE"] == str(tmp_path / "pw")  # Grafana reads its own
    missing = subprocess.run(
        ["sh", str(script), "true"], env={**base, "A_FILE": str(tmp_path / "none")},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "A_FILE" in missing.stderr


# --- the database roles of the stack ---


def test_prefect_uses_its_own_database_role_not_the_superuser(pg_server, store_url, tmp_path):
    server = _compose()["services"]["prefect-server"]["environment"]
    postgres = _compose()["services"]["postgres"]["environment"]
    assert server["PREFECT_SERVER_DATABASE_USER"] == "prefect" != postgres["POSTGRES_USER"]
    assert server["PREFECT_SERVER_DATABASE_NAME"] == "prefect"
    database = psycopg.conninfo.conninfo_to_dict(store_url)["dbname"]
    files = {}
    for name in ("reader", "writer", "prefect"):
        files[name] = tmp_path / name
        files[name].write_text(f"{name}-pw\n")
    env = {
        **os.environ,
        "PATH": f"{_pg_bin()}:{os.environ['PATH']}",
        "PGHOST": str(pg_server.socket_dir),
        "PGPASSFILE": str(pg_server.password_file),  # every role authenticates there
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": database,
        "KERNELWATCH_READER_PASSWORD_FILE": str(files["reader"]),
        "KERNELWATCH_WRITER_PASSWORD_FILE": str(files["writer"]),
        "PREFECT_DB_PASSWORD_FILE": str(files["prefect"]),
    }
    script = INFRA / "docker" / "postgres-init.sh"
    try:
        for _ in range(2):  # a second run changes nothing
            proc = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
        with psycopg.connect(store_url) as conn:
            role = conn.execute(
                "SELECT rolsuper, rolcreatedb, rolcreaterole, rolcanlogin FROM pg_roles "
                "WHERE rolname = 'prefect'"
            ).fetchone()
            assert role == (False, False, False, True)
            owner = conn.execute(
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'prefect'"
            ).fetchone()
            assert owner == ("prefect",)
        logins = {
            "prefect": "prefect:prefect-pw@",
            "kernelwatch_writer": "kernelwatch_writer:writer-pw@",
        }
        for role, target in (("prefect", database), ("kernelwatch_writer", "prefect")):
            with pytest.raises(psycopg.OperationalError, match="permission denied"):
                psycopg.connect(pg_server.url(target).replace("postgres@", logins[role]))
        psycopg.connect(pg_server.url("prefect").replace("postgres@", logins["prefect"])).close()
    finally:
        set_passwords(pg_server.url("postgres"))  # the script set the roles' own
        with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS prefect WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS prefect")


def _pg_bin() -> Path:
    from kernelwatch.store.embedded import find_bin_dir

    return find_bin_dir()


# --- privileges of the worker and the jobs ---


def _job_pods() -> dict[str, dict]:
    return {name: doc["spec"]["template"] for name, doc in documents().items()
            if name in job_templates()}  # fmt: skip


def test_worker_and_jobs_keep_only_the_sandbox_capabilities_and_never_run_kernels_as_root():
    services = _compose()["services"]
    runner = services["runner-h100"]
    assert runner["cap_drop"] == ["ALL"] and runner["cap_add"] == SANDBOX_CAPABILITIES
    # The worker runs no kernel code: it needs no capability at all.
    worker = services["worker-h100"]
    assert worker["cap_drop"] == ["ALL"] and "cap_add" not in worker
    for service in (worker, runner):
        assert "no-new-privileges:true" in service["security_opt"]
    assert _job_pods(), "no base job template found"
    for name, pod in [*_job_pods().items(), *_runner_pods().items()]:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            # A flow-run pod with a runner starts no kernel code: no capability. The runner,
            # and the multi-node pool's pods (which still run their ranks), the sandbox's.
            split = name in _runner_pods() or RUNNER_DIR not in _env(container)
            wanted = {"drop": ["ALL"], "add": SANDBOX_CAPABILITIES} if split else {"drop": ["ALL"]}
            assert context["capabilities"] == wanted, name
    # The Prefect workers run no kernel code: no root, no capabilities at all.
    deployments = [d for d in documents().values() if d["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True


_SANDBOXED_CHILD = """
import os, shutil, signal, subprocess, tempfile
from pathlib import Path
from kernelwatch.harness.isolation.sandbox import Sandbox, _give, leased_identity
lease = leased_identity()
identity = lease.__enter__()
root = Path(tempfile.mkdtemp(prefix="kw-caps-"))
try:
    for sub in ("home", "tmp", "triton", "suites"):
        (root / sub).mkdir()
    _give(root, identity)
    box = Sandbox(root, identity, namespaces=False)
    child = subprocess.Popen(
        box.command(["/bin/sh", "-c", 'id -u; echo x > "$HOME/written"; exec sleep 60']),
        env=box.env(), stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    uid = child.stdout.readline().strip()
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert uid == str(identity.uid), f"the child ran as uid {uid}"
finally:
    shutil.rmtree(root)
    lease.__exit__(None, None, None)
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"
)
def test_job_capabilities_are_all_the_sandbox_needs():
    """A root worker limited to the jobs' capabilities (no mount or network namespace can
    be made then) still puts kernel code under the sandbox user, ends it and cleans up;
    without SETUID the child would keep root, and the run fails instead."""

    def under(capabilities: list[str]) -> subprocess.CompletedProcess:
        bounding = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
        return subprocess.run(
            ["setpriv", "--inh-caps=-all", f"--bounding-set={bounding}", "--",
             sys.executable, "-c", _SANDBOXED_CHILD],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    granted = under(SANDBOX_CAPABILITIES)
    assert granted.returncode == 0, granted.stderr[-2000:]
    refused = under([c for c in SANDBOX_CAPABILITIES if c != "SETUID"])
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr


def test_kubernetes_jobs_reach_only_the_database_prefect_dns_and_public_https():
    policies = [d for d in documents().values() if d["kind"] == "NetworkPolicy"]
    (policy,) = [p for p in policies if p["metadata"]["name"] == "kernelwatch-job"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for name, pod in _job_pods().items():
        assert selector.items() <= pod["metadata"]["labels"].items(), name
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["spec"]["ingress"] == []
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {5432, 4200, 53, 443}
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                # Outside the cluster only: no private range, no cloud metadata service.
                excluded = [ipaddress.ip_network(c) for c in peer["ipBlock"]["except"]]
                for private in ("10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254"):
                    assert any(ipaddress.ip_address(private) in n for n in excluded), private
                assert {p["port"] for p in rule["ports"]} == {443}


# --- the runner split (issue 29): kernel code runs where nothing is worth taking ---

RUNNER_DIR = "KERNELWATCH_RUNNER_DIR"
EXCHANGE = "/var/lib/kernelwatch/exchange"
#: The names secrets go by (harness/isolation/sandbox.py's ``SECRET_NAME``, which the runner
#: refuses).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|DSN", re.IGNORECASE)


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _secret_mounts(spec: dict, container: dict) -> set[str]:
    """Where ``container`` mounts a volume made of a Secret (or a projected token)."""
    secret = {v["name"] for v in spec.get("volumes", []) if "secret" in v or "projected" in v}
    return {m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in secret}


def _runner_pods() -> dict[str, dict]:
    """The pod templates of every runner (label app.kubernetes.io/name: kernelwatch-runner)."""
    return {
        name: doc["spec"]["template"]
        for name, doc in documents().items()
        if doc["kind"] in ("DaemonSet", "Deployment", "StatefulSet")
        and doc["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name")
        == "kernelwatch-runner"
    }


def _mounts(volumes: list[str]) -> dict[str, bool]:
    """Compose short volume syntax: each target path, and whether it is mounted read-only."""
    found = {}
    for entry in volumes:
        parts = entry.split(":")
        found[parts[1]] = len(parts) > 2 and "ro" in parts[2].split(",")
    return found


def test_the_compose_runner_holds_no_secret_and_has_no_network():
    services = _compose()["services"]
    runner = services["runner-h100"]
    assert runner["network_mode"] == "none" and "networks" not in runner
    assert "secrets" not in runner and "ports" not in runner
    env = runner.get("environment", {})
    assert not [n for n in env if SECRET_NAME.search(n)], env
    assert not {"KERNELWATCH_CONFIG", RUNNER_DIR, "PREFECT_API_URL"} & set(env)
    assert runner["command"][:3] == ["kernelwatch", "runner", "serve"]
    assert runner["read_only"] is True
    assert runner["pids_limit"] > 0 and runner["mem_limit"]
    mounts = _mounts(runner["volumes"])
    assert mounts == {f"{EXCHANGE}/requests": True, f"{EXCHANGE}/results": False}
    assert runner["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_every_place_kernel_code_runs_has_an_init_and_room_beyond_one_jobs_processes():
    """Issue 46: without an init, a job's orphans stay zombies of `kernelwatch runner serve`
    (PID 1, which reaps only its own children) and fill the pid table; a job's process
    limit above its container's let one fork bomb stop every other job from forking."""
    from kernelwatch.harness.isolation.jail import PROCESS_LIMIT

    runner = _compose()["services"]["runner-h100"]
    assert runner["init"] is True
    # Both sides of an A/B pair and two more jobs at their limit, and the runner itself.
    assert runner["pids_limit"] > 4 * PROCESS_LIMIT, runner["pids_limit"]
    kernel_pods = {**_runner_pods()}
    kernel_pods.update(
        (name, pod) for name, pod in _job_pods().items()
        if any(RUNNER_DIR not in _env(c) for c in pod["spec"]["containers"])
    )  # fmt: skip
    assert len(kernel_pods) == 5, sorted(kernel_pods)
    for name, pod in kernel_pods.items():
        # The pod's pause container is PID 1 for all its containers, and reaps.
        assert pod["spec"].get("shareProcessNamespace") is True, name


#: The jobs a runner runs at once, each a sandbox of its own: a build stage's children beside
#: both sides of an A/B pair (two flow runs of the pool).
CONCURRENT_JOBS = MAX_WORKERS + 2
#: The sizes a scratch filesystem may have: room for a job's Triton cache and temporary
#: files, and a cap.
SCRATCH_SIZES = {"4g", "4Gi", "8Gi"}


def test_every_runner_gives_each_job_a_capped_scratch_filesystem_and_keeps_tmp_its_own():
    """Issue 46: the runner's ``/tmp`` was one tmpfs (compose: 16 GiB, mode 1777; Kubernetes:
    a 16 GiB emptyDir, whose overflow evicts the runner) for every job, so one job could give
    the other side of an A/B pair ENOSPC. Each runner now names its scratch filesystems
    (``KERNELWATCH_SCRATCH``), one capped memory tmpfs a concurrent job, and keeps ``/tmp``
    to itself (not world-writable), so no job writes anywhere shared but ``/dev/shm``."""
    runner = _compose()["services"]["runner-h100"]
    scratch = runner["environment"][SCRATCH_ENV]
    entries = dict(entry.split(":", 1) for entry in runner["tmpfs"])
    options = {path: dict(o.split("=") for o in opts.split(",")) for path, opts in entries.items()}
    assert int(options["/tmp"]["mode"], 8) & 0o002 == 0, options["/tmp"]
    spaces = {p: o for p, o in options.items() if os.path.dirname(p) == scratch}
    assert len(spaces) >= CONCURRENT_JOBS, sorted(spaces)
    for path, option in spaces.items():
        assert option["size"] in SCRATCH_SIZES and option["mode"] == "0711", path
    for name, pod in _runner_pods().items():
        (container,) = pod["spec"]["containers"]
        scratch = _env(container)[SCRATCH_ENV]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        spaces = {p: v for p, v in mounts.items() if os.path.dirname(p) == scratch}
        assert len(spaces) >= CONCURRENT_JOBS, (name, sorted(spaces))
        for path, volume in spaces.items():
            empty = volume["emptyDir"]
            assert empty["medium"] == "Memory" and empty["sizeLimit"] in SCRATCH_SIZES, path
        # kubelet makes an emptyDir world-writable: an init container makes /tmp root's.
        tmp = mounts["/tmp"]["name"]
        (init,) = pod["spec"]["initContainers"]
        assert init["command"] == ["chmod", "0755", "/tmp"], name
        assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]} == {tmp: "/tmp"}
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name


def test_the_compose_worker_reports_and_runs_no_kernel_code():
    services = _compose()["services"]
    worker, runner = services["worker-h100"], services["runner-h100"]
    assert worker["environment"][RUNNER_DIR] == EXCHANGE
    mounts = _mounts(worker["volumes"])
    assert mounts[f"{EXCHANGE}/requests"] is False and mounts[f"{EXCHANGE}/results"] is True
    # The same volumes at the same paths on both sides (staged suites keep their paths).
    sources = lambda service: {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}  # noqa: E731
    for path in (f"{EXCHANGE}/requests", f"{EXCHANGE}/results"):
        assert sources(worker)[path] == sources(runner)[path]
    assert "deploy" not in worker, "the worker needs no GPU: the runner holds it"

    # Of the services that run kernelwatch's code on the GPU host, only the worker (the
    # reporter) holds a credential.
    def holds(service: dict) -> bool:
        env = service.get("environment", {})
        return bool(service.get("secrets")) or any(SECRET_NAME.search(n) for n in env)

    ours = {n: s for n, s in services.items() if s.get("image") == "kernelwatch-worker"}
    # migrate is the one-shot schema upgrade (the owner's password), before any run.
    assert {n for n, s in ours.items() if holds(s)} == {"worker-h100", "migrate"}


def test_the_kubernetes_runners_hold_no_secret_no_token_and_have_limits():
    runners = _runner_pods()
    assert {n.split("#")[0] for n in runners} == {"runners.yaml", "multi-gpu/runner.yaml"}
    for name, pod in runners.items():
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False, name
        assert spec.get("enableServiceLinks") is False, name
        assert not [v for v in spec["volumes"] if "secret" in v or "projected" in v], name
        for container in spec["containers"]:
            assert "envFrom" not in container, name
            env = container.get("env", [])
            assert not [e for e in env if "valueFrom" in e or SECRET_NAME.search(e["name"])]
            assert container["command"][:3] == ["kernelwatch", "runner", "serve"], name
            limits = container["resources"]["limits"]
            assert limits["memory"] and limits["ephemeral-storage"] and limits["nvidia.com/gpu"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
            assert mounts[f"{EXCHANGE}/requests"] is True and mounts[f"{EXCHANGE}/results"] is False


def test_the_kubernetes_runners_reach_nothing_and_nothing_reaches_them():
    policies = [d for d in documents().values() if d["kind"] == "NetworkPolicy"]
    assert _runner_pods(), "no runner found under infra/k8s"
    for name, pod in _runner_pods().items():
        labels = pod["metadata"]["labels"]
        selecting = [
            p for p in policies
            if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
            and not p["spec"]["podSelector"].get("matchExpressions")
        ]  # fmt: skip
        assert [p["metadata"]["name"] for p in selecting] == ["kernelwatch-runner"], name
        (deny,) = selecting
        assert sorted(deny["spec"]["policyTypes"]) == ["Egress", "Ingress"]
        assert deny["spec"]["ingress"] == [] and deny["spec"]["egress"] == []
        # No flow-run pod's policy selects the runners by accident.
        assert labels["app.kubernetes.io/name"] != "kernelwatch-job"


def test_kubernetes_flow_runs_meet_their_runner_through_split_exchange_volumes():
    runners = {pod["metadata"]["labels"]["kernelwatch.dev/pool"]: pod
               for pod in _runner_pods().values()}  # fmt: skip
    split = {n: p for n, p in _job_pods().items() if not n.startswith("multi-node/")}
    assert split
    for name, pod in split.items():
        spec = pod["spec"]
        (container,) = spec["containers"]
        assert _env(container)[RUNNER_DIR] == EXCHANGE, name
        assert "nvidia.com/gpu" not in container["resources"].get("limits", {}), name
        pool = pod["metadata"]["labels"]["kernelwatch.dev/pool"]
        runner = runners[pool]
        host = lambda s: {v["name"]: v["hostPath"]["path"] for v in s["volumes"] if "hostPath" in v}  # noqa: E731
        mine, theirs = host(spec), host(runner["spec"])
        assert sorted(mine.values()) == sorted(theirs.values()), name
        mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
        assert mounts[f"{EXCHANGE}/requests"] is False and mounts[f"{EXCHANGE}/results"] is True
        (near,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert near["labelSelector"]["matchLabels"] == runner["metadata"]["labels"]
        assert near["topologyKey"] == "kubernetes.io/hostname"


def test_no_secret_reaches_a_pod_as_an_environment_variable():
    raw = [p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml", ".json")]
    for path in raw:
        text = path.read_text()
        assert "envFrom" not in text and "secretKeyRef" not in text, path
    for name, doc in documents().items():
        text = json.dumps(doc)
        assert '"envFrom"' not in text and '"secretKeyRef"' not in text, name
