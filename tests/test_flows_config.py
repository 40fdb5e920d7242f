"""The configuration file: what it holds, defaults, and errors that name the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwatch.analysis.thresholds import DetectorConfig, VerdictConfig
from kernelwatch.config.settings import LOCAL_POOL, load
from kernelwatch.config.tables import ConfigError
from kernelwatch.flows import deployments as deploy

FULL = """
[database]
url = "postgresql://kernelwatch@db/kernelwatch"

[[repositories]]
name = "serving-kernels"
source = "https://example.com/team/serving-kernels.git"
suite = "serving.suite"
branch = "trunk"
workload = "llm"
dtypes = ["bf16"]
archs = ["sm_90a"]
pools = ["gpu-h100"]

[[repositories]]
name = "kwdemo"
source = "/srv/kwdemo"
suite = "kwdemo"

[pools.gpu-h100]
cron = "0 2 * * *"
gpu = "H100"

[pools.gpu-b200]
work_pool = "b200-k8s"
cron = "30 3 * * *"
timezone = "Europe/Paris"

[bench]
budget_s = 1.5
min_samples = 20

[detection]
min_size = 4
window = 20

[verdict]
margin = 0.02

[bisect]
budget_s = 300
auto = false

[notifications]
webhooks = ["https://hooks.example.com/kw"]

[run]
case_timeout_s = 60
report_dir = "reports"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kernelwatch.toml"
    path.write_text(text)
    return path


def test_a_full_file_is_read_with_types_and_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELWATCH_DATABASE_URL", raising=False)
    config = load(write(tmp_path, FULL))
    serving = config.repository("serving-kernels")
    assert (
        serving.branch == "trunk" and serving.dtypes == ("bf16",) and serving.archs == ("sm_90a",)
    )
    demo = config.repository("kwdemo")
    assert (
        demo.branch == "main" and demo.archs == ("sm_90a", "sm_100a") and demo.workload == "smoke"
    )
    assert config.pools["gpu-h100"].work_pool == "gpu-h100"
    assert config.pools["gpu-b200"].work_pool == "b200-k8s"
    assert config.bench.budget_s == 1.5 and config.bench.min_samples == 20
    detection = config.thresholds.detection
    assert detection.min_size == 4 and detection.window == 20
    assert detection.alpha == DetectorConfig().alpha  # untouched keys keep the tuned defaults
    assert config.thresholds.verdict.margin == 0.02
    assert config.database.url == "postgresql://kernelwatch@db/kernelwatch"
    assert config.bisect.budget_s == 300.0 and config.bisect.auto is False
    assert config.notifications.webhooks == ("https://hooks.example.com/kw",)
    assert config.run.case_timeout_s == 60.0 and config.run.report_dir == "reports"
    assert config.pool(LOCAL_POOL).work_pool == LOCAL_POOL


def test_no_file_means_defaults_and_a_clear_error_when_a_repository_is_needed(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNELWATCH_CONFIG", raising=False)
    config = load()
    assert config.path is None and not config.repositories
    with pytest.raises(ConfigError, match=r"no \[\[repositories\]\] configured"):
        config.repository(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[pools.gpu-h100]\ncron = 5\n", r"\[pools.gpu-h100\] cron must be a string"),
        ("[bench]\nbudget = 1\n", r"\[bench\]: unknown key 'budget'"),
        ("[detection]\nmin_size = 2.5\n", r"\[detection\] min_size must be an integer"),
        ("[bisect]\nauto = 1\n", r"\[bisect\] auto must be true or false"),
        ("[alerts]\nx = 1\n", r"unknown table \[alerts\]"),
        ('[[repositories]]\nname = "a"\nsuite = "s"\n', r"#1: missing key source"),
        (
            '[[repositories]]\nname = "a"\nsource = "."\nsuite = "s"\narchs = ["sm_75"]\n',
            r"unknown arch sm_75",
        ),
        (
            '[[repositories]]\nname = "a"\nsource = "."\nsuite = "s"\npools = ["gpu-x"]\n',
            r"pools gpu-x are not defined",
        ),
        ("[run\n", r"cannot read it as TOML"),
        ("[database]\nurl = 3\n", r"\[database\] url must be a string"),
        ("[detection]\nalpha = 2\n", r"\[detection\]: alpha must be in \(0, 1\)"),
        ("[detection]\nlower_is_better = false\n", r"\[detection\]: unknown key 'lower_is_better'"),
        ("[verdict]\nmargn = 0.1\n", r"\[verdict\]: unknown key 'margn'; known: margin"),
        ("[bisect]\nbad_fraction = 1.5\n", r"\[bisect\]: bad_fraction must be in \[0, 1\)"),
        ("[bisect]\nmax_rounds = 0\n", r"\[bisect\]: max_rounds must be at least 1"),
        (
            "[bisect]\nbudget = 1\n",
            r"\[bisect\]: unknown key 'budget'; known: auto, .*bad_fraction",
        ),
        (
            "[static]\nmax_instruction_growth = true\n",
            r"\[static\] max_instruction_growth must be a",
        ),
        (
            "[[thresholds]]\nverdict.margin = 0.1\n",
            r"\[\[thresholds\]\] #1 kernels must be a non-empty",
        ),
        ('[[thresholds]]\nkernels = "gemm"\n', r"#1 kernels must be a non-empty list"),
        ('[[thresholds]]\nkernels = ["gemm"]\ntiming.x = 1\n', r"#1: unknown key 'timing'"),
        (
            '[[thresholds]]\nkernels = ["gemm"]\n'
            '[[thresholds]]\nkernels = ["a*"]\nverdict.margn = 1\n',
            r"\[\[thresholds\]\] #2 verdict: unknown key 'margn'",
        ),
        ('[[thresholds]]\nkernels = ["gemm"]\nstatic = 1\n', r"#1 static must be a table"),
        (
            '[detection]\nmin_size = 8\n[[thresholds]]\nkernels = ["gemm"]\ndetection.window = 7\n',
            r"\[\[thresholds\]\] #1: window must be at least min_size \(8\)",
        ),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load(path)
    assert str(path) in str(caught.value)


def test_thresholds_and_per_kernel_overrides_are_read(tmp_path):
    thresholds = load(
        write(
            tmp_path,
            """
[detection]
alpha = 1e-3
[bisect]
budget_s = 60
bad_fraction = 0.3
[static]
max_instruction_growth = 0.2

[[thresholds]]
kernels = ["flash_attention*", "sdpa"]
verdict.margin = 0.03
[thresholds.static]
max_instruction_growth = 0.4
""",
        )
    ).thresholds
    assert (thresholds.detection.alpha, thresholds.bisect.bad_fraction) == (1e-3, 0.3)
    assert thresholds.static.max_instruction_growth == 0.2
    attention = thresholds.for_kernel("flash_attention_fwd")
    assert attention.verdict.margin == 0.03 and attention.static.max_instruction_growth == 0.4
    assert attention.detection.alpha == 1e-3 and attention.bisect.bad_fraction == 0.3
    assert thresholds.for_kernel("gemm").verdict.margin == VerdictConfig().margin


def test_unknown_repository_and_pool_list_the_configured_ones(tmp_path):
    config = load(write(tmp_path, FULL))
    with pytest.raises(ConfigError, match="configured: serving-kernels, kwdemo"):
        config.repository("other")
    with pytest.raises(ConfigError, match="tracks several repositories"):
        config.repository(None)
    with pytest.raises(ConfigError, match="no pool 'gpu-h200'"):
        config.pool("gpu-h200")


def test_deployments_follow_pools_and_repositories(tmp_path):
    specs = deploy.plan(load(write(tmp_path, FULL)))
    names = {(s.flow, s.name, s.work_pool, s.cron) for s in specs}
    assert names == {
        ("nightly", "serving-kernels-gpu-h100", "gpu-h100", "0 2 * * *"),
        ("nightly", "kwdemo-gpu-h100", "gpu-h100", "0 2 * * *"),
        ("nightly", "kwdemo-gpu-b200", "b200-k8s", "30 3 * * *"),
        ("pr_check", "gpu-h100", "gpu-h100", None),
        ("bisect", "gpu-h100", "gpu-h100", None),
        ("pr_check", "gpu-b200", "b200-k8s", None),
        ("bisect", "gpu-b200", "b200-k8s", None),
    }
    paris = next(s for s in specs if s.name == "kwdemo-gpu-b200")
    assert paris.timezone == "Europe/Paris"
    assert paris.parameters == {"repository": "kwdemo", "pool": "gpu-b200"}
    for entrypoint in deploy.ENTRYPOINTS.values():
        assert (deploy.project_root() / entrypoint.split(":")[0]).is_file(), entrypoint
