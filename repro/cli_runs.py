"""The commands that make runs: prepare a corpus, train, evaluate, score a fairseq checkpoint, and the launchers
(reproduce a table, calibrate a task's regime, work down the evidence queue). Each declares its options and hands
them to a function of the library; repro/cli.py registers them."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from repro.calibration import TASKS as CALIBRATION_TASKS
from repro.cli_options import (CUDA_GRAPHS_HELP, CudaGraphs, JobThreads, Records, RecordsOut, Replace, Root, Threads,
                               TokensPerGpu, Trust, one_line_errors)
from repro.data.prepare import DATASETS
from repro.options import check_folder, check_jobs, check_results, check_scale, default_root, set_threads
from repro.progress import console


def prepare(dataset: str = typer.Argument(..., help=f"One of: {', '.join(DATASETS)}."),
            root: Path = typer.Option(None, "--root", help="Where prepared corpora live (default data/ or $LNREPRO_DATA)."),
            source: Optional[Path] = typer.Option(None, "--source", help="Folder with the raw archives or files, instead of downloading."),
            vocab_size: Optional[int] = typer.Option(None, "--vocab-size", min=100, max=1_000_000, help="SentencePiece vocabulary size (default: the paper's for the dataset).")):
    """Download (or read from --source), preprocess and binarize a corpus.

    Example: lnrepro prepare multi30k --source ../shared/data/multi30k
    """
    from repro.data.prepare import prepare as prepare_corpus
    with one_line_errors():
        root = root or default_root()
        check_folder(root, "--root", writable=True)
        console.print(prepare_corpus(dataset, root, source, vocab_size))


def train(recipe: Path = typer.Argument(..., help="A recipe YAML file, e.g. recipes/18L-18L-b2t.yaml."),
          scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny (the README's scale ladder)."),
          run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Default: runs/<recipe>-<scale>-s<seed> (with --set: runs/<recipe>-<scale>-<hash>-s<seed>)."),
          set_: List[str] = typer.Option([], "--set", help="Override a recipe key, e.g. --set optim.lr=5e-4 (repeatable)."),
          seed: Optional[int] = typer.Option(None, "--seed", help="Seed (train.seed); another seed is the same recipe, not an override."),
          seeds: Optional[str] = typer.Option(None, "--seeds", help=(
              "Train these seeds together as one batched model (repro/train/group.py), e.g. 1-8 or 1,3,5; each "
              "writes its own run folder (under --run-dir, if given) and record.")),
          resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's last checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run the run directory already holds."),
          allow_recipe_change: bool = typer.Option(False, "--allow-recipe-change",
                                                   help="With --resume: continue under a recipe that differs from the checkpoint's."),
          print_config: bool = typer.Option(False, "--print-config", help="Print the resolved recipe and exit."),
          root: Root = None, results: RecordsOut = Path("results"), threads: Threads = None,
          cuda_graphs: CudaGraphs = False, tokens_per_gpu: TokensPerGpu = None,
          precision: Optional[str] = typer.Option(None, "--precision", help=(
              "fp32, bf16 or fp16 (with dynamic loss scaling): train.precision; another than the recipe's is an "
              "override, so its records are kept apart from the recipe's own.")),
          tensorboard: bool = typer.Option(False, "--tensorboard", help="Also write TensorBoard event files to RUN_DIR/tb (pip install -e '.[tb]')."),
          replace_record: Replace = False, trust_checkpoints: Trust = False):
    """Train one table cell. Under torchrun, every process runs this command.

    Example: lnrepro train recipes/18L-18L-b2t.yaml --scale mini
    """
    from repro import training_run as tr
    options = tr.TrainOptions(scale, set_, run_dir, resume, overwrite, allow_recipe_change, root, results, threads,
                              cuda_graphs, tokens_per_gpu, precision, tensorboard, replace_record, trust_checkpoints)
    with one_line_errors():
        if seeds is not None:
            code = tr.train_seeds(recipe, tr.seed_list(seeds, seed, print_config), options)
        else:
            code = tr.train_one(recipe, seed, print_config, options)
    if code:
        raise typer.Exit(code)


def evaluate(run: Path = typer.Argument(..., help="A run directory written by `lnrepro train`."),
             root: Root = None, results: RecordsOut = Path("results"), threads: Threads = None,
             replace_record: Replace = False, trust_checkpoints: Trust = False):
    """Average the last checkpoints, decode/score every test split, write metrics.json and the run's record.

    Example: lnrepro evaluate runs/6L-6L-b2t-mini-s1
    """
    from repro.training_run import evaluate as evaluate_run
    with one_line_errors():
        path = evaluate_run(run, root, results, threads, replace_record, trust_checkpoints)
    console.print(f"record {path}")


def score_fairseq(checkpoint: Path = typer.Argument(..., help="A fairseq Transformer checkpoint (fairseq 0.9-0.12, the authors' fork's included)."),
                  dictionary: Path = typer.Option(..., "--dict", help="Its dictionary (dict.txt, shared by source and target)."),
                  variant: Optional[str] = typer.Option(None, "--variant", help="lnrepro's variant to read it as (default: pre_ln or post_ln from its arguments, b2t where a bottom-to-top argument is on)."),
                  source: Optional[Path] = typer.Option(None, "--source", help="Source sentences, one per line (raw text)."),
                  reference: Optional[Path] = typer.Option(None, "--reference", help="References, one per line, for SacreBLEU."),
                  test_set: Optional[str] = typer.Option(None, "--test-set", help="A SacreBLEU test set instead (downloaded by SacreBLEU), e.g. wmt14/full."),
                  langpair: str = typer.Option("en-de", "--langpair", help="Source and target language."),
                  bpe_codes: Optional[Path] = typer.Option(None, "--bpe-codes", help="subword-nmt BPE codes of the checkpoint's training data."),
                  tokenizer: str = typer.Option("moses", "--tokenizer", help="moses (sacremoses, as fairseq's WMT preparation) or none."),
                  beam: int = typer.Option(4, "--beam", min=1, help="Beam size."),
                  lenpen: float = typer.Option(1.0, "--lenpen", help="Length penalty (the authors: 0.6 on newstest2014, 1.0 elsewhere)."),
                  max_len_a: float = typer.Option(0.0, "--max-len-a", help="Output length limit: a * source tokens + b (fairseq's generate.py: 0, 200)."),
                  max_len_b: int = typer.Option(200, "--max-len-b", min=1, max=100000, help="See --max-len-a."),
                  out: Optional[Path] = typer.Option(None, "--out", help="Write the detokenised hypotheses here."),
                  threads: Threads = None):
    """Translate with a fairseq checkpoint in lnrepro's model and beam search, and score it with SacreBLEU.

    Example: lnrepro score-fairseq b2t_layer18_ave10.pt --dict dict.en.txt --bpe-codes code --test-set wmt14/full --lenpen 0.6 --variant b2t
    """
    from repro.eval.score_fairseq import score
    with one_line_errors():  # a FairseqImportError is a ValueError
        set_threads(threads)
        line = score(checkpoint, dictionary, variant, source, reference, test_set, langpair, bpe_codes, tokenizer,
                     beam, lenpen, (max_len_a, max_len_b), out)
    if line:
        print(line)


def reproduce(table_number: int = typer.Argument(..., metavar="TABLE", help="Table 1-6, 9, 10 or 11 (the extension)."),
              scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny."),
              seeds: int = typer.Option(1, "--seeds", help="Seeds 1..N per cell."),
              jobs: int = typer.Option(2, "--jobs", help="Runs at once (local launcher)."),
              threads: JobThreads = None,
              launcher: str = typer.Option("local", "--launcher", help="local, slurm, or submitit-local (the SLURM path on this machine)."),
              plan_only: bool = typer.Option(False, "--plan", help="Print the runs, what is done, partial or missing; run nothing."),
              cells: List[str] = typer.Option([], "--cells", help="GROUP or GROUP:METHOD, e.g. 6L-6L or 18L-18L:b2t (repeatable)."),
              slurm_config: Optional[Path] = typer.Option(None, "--slurm-config", help="YAML with partition, account, qos, constraint, time, gpus, cpus."),
              partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition."),
              account: Optional[str] = typer.Option(None, "--account", help="SLURM account."),
              time_min: Optional[int] = typer.Option(None, "--time", help="SLURM time limit per run, minutes."),
              gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs per SLURM job (torchrun inside when > 1)."),
              runs: Path = typer.Option(Path("runs"), "--runs", help="Where run directories live."),
              root: Root = None, results: Records = Path("results"),
              cuda_graphs: CudaGraphs = False, tokens_per_gpu: TokensPerGpu = None,
              group: Optional[bool] = typer.Option(None, "--group/--no-group", help=(
                  "Train each cell's missing seeds as one batched model (train --seeds), or one process per run. "
                  "Default: grouped on a GPU, where it is faster; not on a CPU, where it is not."))):
    """Run every cell of a table (train, evaluate; finished runs skipped, interrupted ones resumed), then render it.

    Example: lnrepro reproduce 1 --scale mini --seeds 3 --jobs 16
    """
    from repro import reproduce_run
    slurm = {"config": slurm_config, "partition": partition, "account": account, "time": time_min, "gpus": gpus}
    with one_line_errors():
        check_scale(scale)
        reproduce_run.run(table_number, scale, seeds, cells, jobs, threads, launcher, plan_only, slurm, runs,
                          root or default_root(), results, cuda_graphs, tokens_per_gpu, group)


def calibrate(task: str = typer.Argument(..., help=f"One of: {', '.join(CALIBRATION_TASKS)} (spec: recipes/calibration/v2/TASK.yaml; v1's one folder up)."),
              jobs: Optional[int] = typer.Option(None, "--jobs", help="Runs at once (default: one per core, each on one thread)."),
              threads: JobThreads = None,
              decide_only: bool = typer.Option(False, "--decide-only", help="Apply the rule to the committed records; run nothing."),
              train_grid: bool = typer.Option(False, "--train", help="Train the grid's runs even where committed records already decide."),
              runs: Path = typer.Option(Path("runs/calibration"), "--runs", help="Where the calibration runs train."),
              root: Root = None, results: Records = Path("results"),
              rules: str = typer.Option("v2", "--rules", help="v2 (2026-11-29: learning rate, warmup and tokens per update, minimax regret; recipes/calibration/v2/) or v1 (warmup, lowest mean)."),
              group: Optional[bool] = typer.Option(None, "--group/--no-group", help="v2: train a baseline's learning rates and warmups at one tokens factor as one batched model (default: on a GPU)."),
              tokens_factor: Optional[int] = typer.Option(None, "--tokens-factor", help="v2: train only the grid's settings at this tokens factor (a grid split across machines); the decision reads the whole grid."),
              setting: Optional[str] = typer.Option(None, "--setting", help="v2: train only this grid setting's baseline runs, named as their records are (w1000-lr0.0005-x4; x1 has no suffix); the decision reads the whole grid."),
              cuda_graphs: bool = typer.Option(False, "--cuda-graphs", help="v2, with --no-group: " + CUDA_GRAPHS_HELP),
              one_forward: bool = typer.Option(False, "--one-forward", help="v2, with --no-group: a tokens-xK run makes each update's K batches in one forward (train --tokens-per-gpu), the same update with the launches of one batch."),
              train_group: Optional[str] = typer.Option(None, "--train-group", hidden=True, help="v2: train BASELINE:K's unfinished settings as one group (the grouped grid's jobs).")):
    """Choose a task's mini regime on the two baselines alone: run the spec's grid, record it, apply the rule.

    Example: lnrepro calibrate mt
    """
    from repro import calibration_run
    with one_line_errors():
        calibration_run.calibrate(task, rules, jobs, threads, decide_only, train_grid, runs, root or default_root(),
                                  results, group, train_group, tokens_factor, cuda_graphs, one_forward, setting)


def queue(scale: str = typer.Option("mini", "--scale", help="Whose records decide what is still needed."),
          hours: Optional[float] = typer.Option(None, "--hours", min=0.0, help="Show (or with --run, train) only the "
                                                "sets that fit this many priced hours, in order."),
          limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N queued sets."),
          fmt: str = typer.Option("text", "--format", help="text or json."),
          run: bool = typer.Option(False, "--run", help="Train the queued runs in order, in lanes that resume; the whole "
                                   "queue (no --hours or --limit) is rebuilt from the records as each run ends."),
          jobs: Optional[int] = typer.Option(None, "--jobs", help="Runs at once (default: one per core, one thread "
                                             "each; one on a GPU)."),
          runs: Optional[Path] = typer.Option(None, "--runs", help="Where the runs train: outside the checkout, so a "
                                              "fresh clone resumes them (default $LNREPRO_RUNS or ~/lnrepro-runs); "
                                              "a run stopped part-way there is priced for what it has left."),
          root: Root = None, results: Records = Path("results")):
    """The runs the claims still need, as decisive sets ordered by claims decided per priced hour; --run trains
    them in that order.

    Example: lnrepro queue --hours 10
    """
    import torch

    from repro import queue as evidence_queue
    on_gpu = torch.cuda.is_available()
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        if fmt not in ("text", "json"):
            raise ValueError(f"--format {fmt!r}: expected text or json")
        runs = (runs or evidence_queue.default_runs()).expanduser()
        check_folder(runs, "--runs")
        check_jobs(jobs)
        sets = evidence_queue.build(results, scale, on_gpu, runs_dir=runs)
        print(evidence_queue.render(sets, hours, fmt, limit), end="")
        if run:
            whole = hours is None and limit is None  # the whole queue follows the records; a chosen part stays fixed
            evidence_queue.run(sets, hours, limit, jobs, runs, root or default_root(), results, on_gpu, scale,
                               (lambda: evidence_queue.build(results, scale, on_gpu, runs_dir=runs)) if whole else None)
