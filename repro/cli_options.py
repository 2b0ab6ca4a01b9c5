"""What the commands share: the options several take, declared once, and the one-line error every refusal
becomes (exit 2)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from repro.config import RecipeError
from repro.progress import console

MAX_THREADS = 4 * (os.cpu_count() or 1)  # more threads than that only slows a run down

# options several commands take, declared once
Root = Annotated[Optional[Path], typer.Option("--root", help="Prepared corpora (default data/ or $LNREPRO_DATA).")]
Records = Annotated[Path, typer.Option("--results", help="Folder of run records.")]
RecordsOut = Annotated[Path, typer.Option("--results", help="Where run records are written.")]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS,
                                                help="CPU threads (default $LNREPRO_THREADS or all cores).")]
JobThreads = Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS,
                                                   help="CPU threads per run (default: cores / jobs).")]
Trust = Annotated[bool, typer.Option("--trust-checkpoints", help=(
    "Load checkpoints that have no .sha256 beside them (refused otherwise: their bytes cannot be checked)."))]
Replace = Annotated[bool, typer.Option("--replace-record", help=(
    "Replace the finished record of another run that holds this run's slot (it is never replaced otherwise)."))]
TokensPerGpu = Annotated[Optional[int], typer.Option("--tokens-per-gpu", help=(
    "Tokens each GPU takes per forward, a multiple of the recipe's data.max_tokens: fewer, larger forwards make the "
    "same update (the same batches); the record says which was used."))]
CUDA_GRAPHS_HELP = ("On a GPU: replay each batch's forward and backward as a CUDA graph, the same arithmetic with "
                    "far fewer kernel launches (MT and summarisation, one process, fp32 or bf16).")
CudaGraphs = Annotated[bool, typer.Option("--cuda-graphs", help=CUDA_GRAPHS_HELP)]


def fail(message: str, code: int = 2):
    from rich.text import Text
    console.print(Text.assemble(("error:", "red"), " ", str(message)), soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def one_line_errors():
    """The library's refusals (a ValueError or one of its own errors naming what is at fault) as the command's
    one-line error. OSError: a path argument that is not usable (a file where a folder is wanted, no permission),
    whose message names the path."""
    from repro.data.text import PrepareError
    from repro.eval.evaluate import EvaluateError
    from repro.train.checkpoint import CheckpointError
    try:
        yield
    except (RecipeError, PrepareError, EvaluateError, CheckpointError, OSError, ValueError) as e:
        fail(str(e))
