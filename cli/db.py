"""``kernelwatch db``: the results store's server, schema and spool.

With no database URL configured (``KERNELWATCH_DATABASE_URL`` or ``[database] url`` in
``kernelwatch.toml``) every command uses the embedded PostgreSQL, starting it if needed.
"""

from __future__ import annotations

import typer

from kernelwatch.cli.connection import store_config, store_target
from kernelwatch.cli.console import fail, progress, stderr

db_app = typer.Typer(no_args_is_help=True, help="The results store: server, schema, spool.")


@db_app.command()
def url() -> None:
    """Print the database URL (starting the embedded server if that is the one in use)."""
    typer.echo(store_target().url)


@db_app.command()
def status() -> None:
    """Report the server, the schema revision and the spooled runs waiting for replay."""
    from kernelwatch.store import migrate
    from kernelwatch.store.connect import redacted
    from kernelwatch.store.spool import pending

    config = store_config()
    target = store_target(config)
    if target.embedded is not None and target.state is not None:
        how = "started now" if target.state.started else "already running"
        typer.echo(f"server: embedded PostgreSQL {target.state.version}, {how} "
                   f"(pid {target.state.pid}, {target.embedded.root})")  # fmt: skip
    else:
        typer.echo(f"server: {redacted(target.url)}")
    typer.echo(f"url: {redacted(target.url)}")
    revision, behind = _state(target.url)
    if behind is None:
        typer.echo(f"schema: {revision} (head)")
    elif revision == migrate.HEAD:
        typer.echo(f"schema: {revision} (head); {behind}: run `kernelwatch db upgrade`")
    else:
        typer.echo(f"schema: {revision or 'none'}; head is {migrate.HEAD}: run "
                   f"`kernelwatch db upgrade`")  # fmt: skip
    typer.echo(f"spool: {len(pending(config.spool_dir))} run(s) waiting in {config.spool_dir}")


@db_app.command()
def upgrade() -> None:
    """Migrate the database's schema to this kernelwatch's revision."""
    from kernelwatch.store import migrate

    target = store_target()
    before, behind = _state(target.url)
    migrate.upgrade(target.url)
    made = "" if behind is None else "; reporting views made from this kernelwatch's definitions"
    typer.echo(f"schema: {before or 'none'} -> {_state(target.url)[0]}{made}")


@db_app.command(name="replay")
def replay_command() -> None:
    """Load the runs spooled while the database was unreachable. Exit 1 if any is left."""
    from kernelwatch.store.spool import replay

    config = store_config()
    with progress() as bar_ui:
        bar_ui.add_task("replaying spooled runs", total=None)
        report = replay(config)
    for path, reason in report.rejected:
        stderr.print(f"rejected {path}: {reason}", markup=False, highlight=False)
    typer.echo(f"replay: {len(report.loaded)} loaded, {len(report.duplicates)} already stored, "
               f"{len(report.rejected)} rejected, {report.remaining} left")  # fmt: skip
    if report.remaining:
        fail(f"{report.remaining} run(s) left in {config.spool_dir}: {report.reason}", code=1)
    if report.rejected:
        raise typer.Exit(1)


@db_app.command()
def stop() -> None:
    """Stop the embedded server (nothing to do when a database URL is configured)."""
    from kernelwatch.store.embedded import EmbeddedServer

    config = store_config()
    if config.url:
        fail("a database URL is configured; kernelwatch only stops its embedded server", code=2)
    was_running = EmbeddedServer(config.pg_dir).stop()
    typer.echo("server: stopped" if was_running else "server: was not running")


def _state(url: str) -> tuple[str | None, str | None]:
    """The schema revision, and what an upgrade would change (None: nothing)."""
    from kernelwatch.store import migrate
    from kernelwatch.store.connect import StoreUnavailable, open_connection

    try:
        conn = open_connection(url)
    except StoreUnavailable as exc:
        fail(str(exc), code=1)
    with conn:
        return migrate.current_revision(conn), migrate.pending(conn)
