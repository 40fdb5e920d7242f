"""``kernelwatch dashboards``: export the Grafana dashboards and alerting as files, or push
them to a running Grafana."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import fail, stderr
from kernelwatch.config.redact import redact, redact_url

dashboards_app = typer.Typer(
    no_args_is_help=True, help="Grafana dashboards and alerting as code: export, push."
)
app.add_typer(dashboards_app, name="dashboards")


def _checked_dashboards(pools: Sequence[str]) -> list[dict]:
    from kernelwatch.dashboards import catalog, checks
    from kernelwatch.dashboards.cost import Prices

    dashboards = catalog.dashboards(pools, Prices.from_config(configuration()))
    found = checks.problems(dashboards)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        fail(f"generated dashboards are broken: {found[0]}{more}", code=1)
    return dashboards


@dashboards_app.command()
def export(
    directory: Annotated[Path, typer.Argument(help="Where to write <uid>.json per dashboard.")],
    provisioning: Annotated[
        Path | None,
        typer.Option(
            help="Also write the alert rules, contact points and notification policy under "
            "this Grafana provisioning directory (alerting/kernelwatch.json)."
        ),
    ] = None,
) -> None:
    """Write every dashboard's JSON (and optionally the alerting provisioning file, for the
    pools and announcer of kernelwatch.toml)."""
    from kernelwatch.dashboards.alert_rules import AlertSettings
    from kernelwatch.dashboards.export import write_alerting, write_dashboards

    for path in (directory, provisioning):
        if path is not None and path.exists() and not path.is_dir():
            fail(f"{path} exists and is not a directory", code=2)
    settings = AlertSettings.from_config(configuration())
    paths = write_dashboards(directory, _checked_dashboards(settings.pools))
    if provisioning is not None:
        paths.append(write_alerting(provisioning, settings))
    for path in paths:
        typer.echo(str(path))


@dashboards_app.command()
def push(
    url: Annotated[
        str, typer.Option(envvar="KERNELWATCH_GRAFANA_URL", help="Grafana, e.g. http://host:3000.")
    ],
    token: Annotated[
        str | None,
        typer.Option(envvar="KERNELWATCH_GRAFANA_TOKEN", help="A service-account token."),
    ] = None,
    user: Annotated[
        str | None, typer.Option(envvar="KERNELWATCH_GRAFANA_USER", help="Basic-auth user.")
    ] = None,
    password: Annotated[
        str | None,
        typer.Option(envvar="KERNELWATCH_GRAFANA_PASSWORD", help="Basic-auth password."),
    ] = None,
    datasource_url: Annotated[
        str | None,
        typer.Option(
            envvar="KERNELWATCH_GRAFANA_DATASOURCE_URL",
            help="Also upsert the data source: postgresql://kernelwatch_reader:PW@HOST/kernelwatch",
        ),
    ] = None,
    webhook_url: Annotated[
        str, typer.Option(envvar="KERNELWATCH_ALERT_WEBHOOK_URL", help="Webhook for alerts.")
    ] = "",
    slack_url: Annotated[
        str,
        typer.Option(envvar="KERNELWATCH_SLACK_WEBHOOK_URL", help="Slack incoming webhook."),
    ] = "",
    email: Annotated[
        str, typer.Option(envvar="KERNELWATCH_ALERT_EMAILS", help="Addresses, ';'-separated.")
    ] = "",
) -> None:
    """Upsert the folder, dashboards, alert rules and (when a receiver is given) contact
    points and notification policy, by uid: pushing twice changes nothing more."""
    from kernelwatch.dashboards import datasource
    from kernelwatch.dashboards import push as pushing
    from kernelwatch.dashboards.alert_rules import AlertSettings, Receivers

    if urlparse(url).scheme not in ("http", "https") or not urlparse(url).hostname:
        fail(f"--url must be an http(s) URL of Grafana, not {redact_url(url)!r}", code=2)
    if token and (user or password):
        fail("give either --token or --user/--password, not both", code=2)
    if bool(user) != bool(password):
        fail("--user and --password go together", code=2)
    try:
        source = datasource.from_url(datasource_url) if datasource_url else None
    except datasource.DatasourceError as exc:
        fail(f"--datasource-url: {exc}", code=2)
    credential = token or ((user, password) if user and password else None)
    receivers = Receivers(webhook_url=webhook_url, slack_url=slack_url, emails=email)
    settings = AlertSettings.from_config(configuration())
    try:
        result = pushing.push(
            pushing.connect(url, credential), _checked_dashboards(settings.pools), receivers,
            source, settings,
        )  # fmt: skip
    except pushing.GrafanaUnavailable as exc:
        fail(f"{redact_url(url)}: {redact(str(exc), password or '', token or '')}", code=1)
    for name in result.created:
        typer.echo(f"created {name}")
    for name in result.updated:
        typer.echo(f"updated {name}")
    if not (webhook_url or slack_url or email):
        stderr.print(
            "note: no receiver given: contact points and notification policy left as they are"
        )
    for failure in result.failed:
        failure = redact(failure, password or "", token or "")
        stderr.print(f"error: {failure}", markup=False, highlight=False, soft_wrap=True)
    if result.failed:
        raise typer.Exit(1)
