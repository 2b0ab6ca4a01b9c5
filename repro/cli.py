"""The `lnrepro` command line: the commands that make runs (repro/cli_runs.py) and those that read the evidence
(repro/cli_evidence.py), each declaring its options and handing them to a function of the library; a refusal
anywhere is one line naming the option, file or value at fault, exit 2 (repro/cli_options.py)."""

from __future__ import annotations

import typer

from repro import __version__, cli_evidence, cli_runs
from repro.progress import console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Reproduce 'On Layer Normalizations and Residual Connections in Transformers' "
                       "(Takase et al. 2022): prepare data, train a table cell, evaluate it, compare with the paper.")


def _version(value: bool):
    if value:
        print(f"lnrepro {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Show the version and exit.")):
    pass


# the commands, in the order `lnrepro --help` lists them
for command in (cli_runs.prepare, cli_runs.train, cli_runs.evaluate):
    app.command()(command)
app.command("score-fairseq")(cli_runs.score_fairseq)
for command in (cli_evidence.table, cli_evidence.figure, cli_evidence.curves, cli_evidence.recipes,
                cli_evidence.claims, cli_evidence.report, cli_evidence.references, cli_evidence.runs,
                cli_runs.reproduce, cli_runs.calibrate, cli_runs.queue):
    app.command()(command)


def entry():
    """The `lnrepro` command: a wrong argument or option is one line naming it, exit 2 (click's default is three)."""
    import faulthandler
    import sys

    from rich.text import Text
    try:  # a crash in native code (a segfault, glibc's abort) prints the Python stack it hit
        faulthandler.enable()
    except (RuntimeError, ValueError):  # no stderr to print to (closed: `2>&-`); io.UnsupportedOperation too
        pass
    usage_error = typer.BadParameter.__mro__[1]  # the UsageError of the click that typer carries
    try:
        code = app(standalone_mode=False)
    except usage_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `lnrepro` alone: the help, as before
            print(e.format_message())
            sys.exit(2)
        where = e.ctx.command_path if getattr(e, "ctx", None) is not None else "lnrepro"
        console.print(Text.assemble(("error:", "red"), f" {where}: {e.format_message()} (see {where} --help)"),
                      soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    entry()
