"""What runs cost: each machine's pace of each recipe (and of its depth: pace_of) from the stretches of training
the records kept, the durations whole runs took, the rates benchmarks measured on GPUs, and the hours and wall time
of runs still to make. The planner (`reproduce --plan`), the runs still to run, the findings, calibration and the
queue all price runs here, so that they never disagree about what a run costs.

Paces are never pooled over machines: two CPUs of one name ran mini MT 2.5x apart (repro/provenance.py: machine)."""

from __future__ import annotations

import json
from pathlib import Path

from repro import provenance
from repro.config import RecipeError, resolve
from repro.provenance import machine, where
from repro.results import current_hash, load_records, recipes_dir, stretch_hardware, stretches


def depth(recipe_name: str) -> str:
    """A recipe's task and depth, shared by its methods: "18L-18L" of "18L-18L-b2t"."""
    return recipe_name.rsplit("-", 1)[0]


def recipe_updates(recipe_name: str, scale: str) -> int:
    """The updates a recipe trains for at a scale."""
    return resolve(recipes_dir() / f"{recipe_name}.yaml", scale).recipe.optim.max_updates


def recipe_batches(recipe_name: str, scale: str) -> int:
    """The batches of data.max_tokens one update of a recipe takes at a scale (optim.gpus_per_update)."""
    return resolve(recipes_dir() / f"{recipe_name}.yaml", scale).recipe.optim.gpus_per_update


def machines_of(rec: dict) -> set:
    return {machine(hw) for hw in stretch_hardware(rec)}


# A CPU stretch whose process used less than this share of its threads' time shared their cores with other work
# (alone, a run keeps its threads 0.9-1.0 busy; beside another 2-thread run on 2 cores, about 0.5).
SHARED_BELOW = 0.75


def recorded_stretches(records: list[dict]) -> list[dict]:
    """Every stretch of training in `records` that tells a pace: a resumed run's stretches one by one (each keeps its
    hardware, threads and seconds, so a run resumed here from another machine's checkpoint gives only its stretches
    here), an unresumed run whole; with the batches of its recipe's size the stretch made (updates times
    `batches_per_update`, times the runs of a group), so that a tokens-x4 calibration run or an earlier regime's
    run prices a recipe's update as well as the recipe's own runs do; and how many such runs the machine trains at
    once (a CPU's cores over the stretch's threads, one-thread runs side by side; a GPU one).
    Records of before threads were kept have none; a CPU stretch that shared its cores with other work (its CPU
    seconds tell, where kept) does not stand for a run's pace at its threads."""
    out = []
    for rec in records:
        per_update = batches_per_update(rec)
        for part in stretches(rec):
            updates = (part.get("to_update") or 0) - (part.get("from_update") or 0)
            hw, seconds, cpu = (part.get("hardware") or rec.get("hardware") or {}, part.get("duration_s"),
                                part.get("cpu_s"))
            if not seconds or updates <= 0:
                continue
            if not hw.get("gpus") and cpu is not None and cpu < SHARED_BELOW * seconds * (hw.get("threads") or 0):
                continue
            out.append({"recipe": rec["recipe_name"], "machine": machine(hw), "where": where(hw),
                        "threads": hw.get("threads"), "gpus": hw.get("gpus") or 0,
                        "cuda_graphs": bool(part.get("cuda_graphs")), "seconds": seconds,
                        "batches": updates * per_update * (part.get("group_size") or 1),
                        "at_once": 1 if hw.get("gpus") or not hw.get("threads") else
                        max(1, (hw.get("cpu_count") or 1) // hw["threads"])})
    return out


def batches_per_update(rec: dict) -> int:
    """Batches of its recipe's size (data.max_tokens, on all its GPUs together) one update of a record's run took:
    as its batching says where kept (a tokens-x4 run's four, in four forwards or one), else its overrides'
    optim.gpus_per_update (a calibration run), else its recipe's at its scale."""
    b = rec.get("batching")
    if b:
        world = (rec.get("hardware") or {}).get("world_size") or 1
        return b["forwards_per_update"] * b["batches_per_forward"] * world
    for o in rec.get("overrides") or []:
        if o.startswith("optim.gpus_per_update="):
            return int(o.split("=", 1)[1])
    try:
        return recipe_batches(rec["recipe_name"], rec["scale"])
    except RecipeError:  # a recipe since removed: its own batch
        return 1


def stretch_paces(records: list[dict], threads: int, here: str,
                  cuda_graphs: bool = False) -> list[tuple[str, float, int]]:
    """(recipe name, seconds, batches) of every stretch of training in `records` (recorded_stretches)
    made on machine `here` with `threads` CPU threads, with CUDA graphs or without as
    `cuda_graphs` says."""
    return [(s["recipe"], s["seconds"], s["batches"]) for s in recorded_stretches(records)
            if s["machine"] == here and s["threads"] == threads and s["cuda_graphs"] == cuda_graphs]


def estimate(name: str, scale: str, threads: int, paces: list[tuple[str, float, int]],
             pools: tuple, depths_now: dict[str, float]) -> tuple[list[float], str]:
    """Durations that stand for recipe `name`'s cost, and whence: its own runs, then the other methods of its task
    and depth (they cost about the same: "18L-18L-pre_ln" from "18L-18L-b2t"); first as the pace of this machine's
    stretches at the planned threads times the recipe's updates, then as whole runs, on this machine before any
    other (two CPUs of one name ran mini MT 2.5x apart); last, where nothing recorded tells of its depth yet (60L-12L
    before its first record), the seconds per update of a run of its depth training now (`depths_now`)."""
    for pick, what in ((lambda n: n == name, ""), (lambda n: depth(n) == depth(name), "its depth")):
        hits = [(seconds, batches) for n, seconds, batches in paces if pick(n)]
        if hits:  # seconds per batch over all the stretches, each weighing as many batches as it made
            per_batch = sum(s for s, _ in hits) / sum(b for _, b in hits)
            at = f"{threads} thread" + ("s" if threads > 1 else "")
            return [per_batch * recipe_batches(name, scale) * recipe_updates(name, scale)], \
                ", ".join(x for x in (what, at) if x)
    for records, source in pools:
        durations, what = whole_runs(records, name)
        if durations:
            return durations, ", ".join(x for x in (what, source) if x)
    if depth(name) in depths_now:
        return [depths_now[depth(name)] * recipe_updates(name, scale)], "its depth, training now"
    return [], ""


def whole_runs(records: list[dict], name: str) -> tuple[list[float], str]:
    """The durations that stand for a run of recipe `name` among `records`' whole runs (full_length_s): its own,
    else its depth's ("its depth")."""
    own = [full_length_s(r) for r in records if r["recipe_name"] == name]
    if own:
        return own, ""
    return [full_length_s(r) for r in records if depth(r["recipe_name"]) == depth(name)], "its depth"


def calibration_timings(results_dir: Path, scale: str) -> list[dict]:
    """The calibration grids' runs (results/<scale>/calibration/<task>/, and v2/<task>/) as timings of their baseline
    recipes: the last word on a task's cost before any table run of it has been made (ASR's grid comes before
    Table 4)."""
    out = []
    for path in sorted((Path(results_dir) / scale / "calibration").rglob("*.json")):
        rec = json.loads(path.read_text())
        if isinstance(rec, dict) and "recipe_name" in rec and rec.get("duration_s") and rec.get("step"):
            out.append({**rec, "updates": rec["step"], "calibration": True})
    return out


def full_length_s(rec: dict) -> float:
    """A record's duration as a run of its recipe's length and batch as they are now: a completed run of the current
    recipe is one; a run the failure rule stopped early stands for a whole one at its own rate (Gigaword 18L-18L
    Post-LN stopped at update 2,875 of 3,500), and so do a calibration run, whose length is the grid's cap and whose
    batch may be four of the recipe's, and a run of an earlier regime of its recipe (Gigaword's 3,500 updates
    before its 6,750)."""
    try:
        if (rec.get("status") != "failed" and not rec.get("calibration")
                and rec.get("recipe_hash") == current_hash(rec["recipe_name"], rec["scale"])):
            return rec["duration_s"]
        planned = recipe_updates(rec["recipe_name"], rec["scale"]) * recipe_batches(rec["recipe_name"], rec["scale"])
    except RecipeError:
        return rec["duration_s"]
    made = (rec.get("updates") or 0) * batches_per_update(rec)
    return rec["duration_s"] * planned / made if made else rec["duration_s"]


def wall_time(estimates: list[float], jobs: int) -> float:
    """How long runs of these durations take with `jobs` going at once, each started in order as a lane frees (the
    local launcher's order)."""
    import heapq
    lanes = [0.0] * max(jobs, 1)
    for seconds in estimates:
        heapq.heappush(lanes, heapq.heappop(lanes) + seconds)
    return max(lanes)


BENCHMARK_RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def measured_rates(folder: Path = BENCHMARK_RESULTS) -> list[dict]:
    """Paper-scale MT training rates measured on GPUs (benchmarks/paper_scale.py's rows, and the bf16 eager rows of
    train_throughput.py's GPU files): device, depth, precision, mode, tokens per GPU, target tokens/s, file."""
    out = []
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue
        device = (data.get("machine") or {}).get("device", "")
        if not isinstance(data, dict) or "cpu" in device.lower() or not device:
            continue
        for row in data.get("rows") or []:
            if "depth" in row and "tokens_per_s" in row:  # paper_scale.py
                out.append({"device": device, "depth": row["depth"], "precision": row["precision"],
                            "mode": row["mode"], "tokens_per_gpu": row["tokens_per_gpu"],
                            "tokens_per_s": row["tokens_per_s"], "file": path.name})
            elif "lnrepro_tokens_per_s" in row and not data.get("compile"):  # train_throughput.py: bf16 on a GPU
                out.append({"device": device, "depth": row["layers"], "precision": "bf16", "mode": "eager",
                            "tokens_per_gpu": row["target_tokens"], "tokens_per_s": row["lnrepro_tokens_per_s"],
                            "file": path.name})
    return out


MEASURED = "mini_step.py on "  # the label of a machine's measured paces: "mini_step.py on AMD EPYC 26/2, 1 thread"


def measured_paces(folder: Path = BENCHMARK_RESULTS) -> dict[str, dict[str, list[float]]]:
    """The CPU paces benchmarks/mini_step.py --paces measured (benchmarks/results/mini_paces_cpu_*.json), as
    machine_paces keeps the records' ({label: {recipe name: [seconds, batches]}}): the training step alone, its CPU
    time per batch, under the label MEASURED + the machine's. They price a depth no record prices, scaled like
    another machine's paces by the ratio on the depths both have (scaled_paces): a deep model's cost is measured,
    not guessed from a shallow one's."""
    out: dict[str, dict[str, list[float]]] = {}
    for path in sorted(Path(folder).glob("mini_paces_cpu_*.json")) if Path(folder).is_dir() else []:
        try:
            rows = json.loads(path.read_text(encoding="utf-8")).get("rows") or []
        except (ValueError, OSError, AttributeError):
            continue
        for row in rows:
            name, machine_words = row.get("recipe"), row.get("machine")
            if not (name and machine_words and row.get("steps") and row.get("cpu_ms_per_step")):
                continue
            total = out.setdefault(MEASURED + machine_words, {}).setdefault(name, [0.0, 0])
            total[0] += row["cpu_ms_per_step"] / 1000 * row["steps"]
            total[1] += row["steps"]
    return out


def measured_estimate(recipe_name: str, scale: str, gpus: int, rates: list[dict]) -> tuple[float | None, str]:
    """A paper-scale MT run's seconds on `gpus` GPUs at the fastest rate measured for its depth and precision
    (a GPU's rate times the GPUs: DDP overlapping its all-reduce), or None with what was measured instead."""
    r = resolve(recipes_dir() / f"{recipe_name}.yaml", scale).recipe
    if scale != "paper" or r.task != "mt":
        return None, ""
    tokens = r.data.max_tokens * r.optim.gpus_per_update * r.optim.max_updates
    same = [x for x in rates if x["depth"] == depth(recipe_name)]
    mine = [x for x in same if x["precision"] == r.train.precision]
    if mine:
        best = max(mine, key=lambda x: x["tokens_per_s"])
        return tokens / (gpus * best["tokens_per_s"]), (
            f"measured {best['device']} rate, {best['precision']}, {best['mode']}, {best['tokens_per_gpu']:,} tokens/GPU, "
            f"x{gpus} GPU")
    if same:
        best = max(same, key=lambda x: x["tokens_per_s"])
        hours = tokens / (gpus * best["tokens_per_s"]) / 3600
        return None, (f"no {r.train.precision} rate measured; {best['precision']} on {best['device']}: ~{hours:.0f} h "
                      f"on {gpus} GPU with `train --precision {best['precision']} "
                      f"--tokens-per-gpu {best['tokens_per_gpu']}`")
    return None, ""


def group_gain(size: int, device: str, folder: Path = BENCHMARK_RESULTS) -> float | None:
    """How many times the member-updates per second of standalone runs a group of `size` makes on `device` (a GPU's
    name, or "cpu"), as benchmarks/group_step.py measured it: the largest measured group not above `size`. None
    where nothing was measured on such a device."""
    best = None
    for path in sorted(Path(folder).glob("group_step*.json")) if Path(folder).is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data["rows"]
            where = (data.get("machine") or {}).get("device", "cpu")
        except (ValueError, OSError, KeyError, TypeError):
            continue
        if where != device:
            continue
        alone = [r["member_updates_per_s"] for r in rows if r.get("mode") == "standalone"]
        fits = sorted((r["group"], r["member_updates_per_s"]) for r in rows
                      if r.get("mode") == "group" and r.get("group", 0) <= size)
        if alone and fits:
            best = fits[-1][1] / alone[0]
    return best


def machine_label(stretch: dict) -> str:
    """A short name for a machine and how it trained: "1 x H200, graphs", "Intel Xeon 6/167, 1 thread"."""
    hw = stretch["where"]
    if stretch["gpus"]:
        name = hw.split(", ")[0].replace("NVIDIA ", "").replace(" 80GB HBM3", "")
        return name + (", graphs" if stretch["cuda_graphs"] else "")
    cpu = hw.split(", ")[0]
    short = " ".join(w for w in cpu.replace("(R)", "").replace("(TM)", "").split()
                     if w not in ("Processor", "(AVX512)", "(AVX2)", "CPU"))
    family = next((part.split("family ")[1].replace(" model ", "/") for part in hw.split(", ") if "family" in part), "")
    threads = stretch["threads"]
    return f"{short} {family}".strip() + f", {threads} thread{'s' if threads > 1 else ''}"


def here_label(threads: int, cuda_graphs: bool = False) -> str:
    """This machine's label (machine_label) when it trains runs of `threads` threads, with CUDA graphs or without."""
    hw = provenance.hardware()
    return machine_label({"where": where(hw), "gpus": hw.get("gpus") or 0, "threads": threads,
                          "cuda_graphs": cuda_graphs})


def depth_paces(recorded: dict[str, list[float]]) -> dict[str, list[float]]:
    """[seconds, batches] of each depth over its recipes a machine's paces (machine_paces, one label's) keep."""
    out: dict[str, list[float]] = {}
    for name, (seconds, batches) in recorded.items():
        total = out.setdefault(depth(name), [0.0, 0])
        total[0], total[1] = total[0] + seconds, total[1] + batches
    return out


def pace_of(recorded: dict[str, list[float]], recipe_name: str) -> list[float] | None:
    """[seconds, batches] a machine's paces (machine_paces, one label's) keep of a recipe, else of its depth's
    recipes together: they cost about the same."""
    return recorded.get(recipe_name) or depth_paces(recorded).get(depth(recipe_name))


def same_kind(label: str) -> str:
    """What makes two labels' paces comparable: a CPU's thread count ("1 thread"), or "GPU"."""
    return label.rsplit(", ", 1)[1] if "thread" in label else "GPU"


def _ratio(mine: dict[str, list[float]], theirs: dict[str, list[float]]) -> tuple[int, float] | None:
    """(their batches of the depths both paces keep, the seconds `mine` took for its batches of those depths against
    the seconds `theirs` would), or None where they share no depth."""
    own, their_depths = depth_paces(mine), depth_paces(theirs)
    shared = [d for d in own if d in their_depths]
    if not shared:
        return None
    took = sum(own[d][0] for d in shared)
    would = sum(their_depths[d][0] / their_depths[d][1] * own[d][1] for d in shared)
    return sum(their_depths[d][1] for d in shared), took / would


def wall_per_step(paces: dict[str, dict[str, list[float]]], label: str) -> tuple[float, str] | None:
    """The wall seconds of training per second of `label`'s measured step (MEASURED + label), and the machine they
    come from: `label`'s own records against its measured step where it keeps both, else those of the machine of its
    kind whose records share the most batches with its own measured step. A run's wall time holds more than its
    steps (validation, checkpoints, the decode), so a measured step alone prices a run short. None where no machine
    of its kind keeps both."""
    walls = [(other == label, *got, other) for other in paces if not other.startswith(MEASURED)
             and same_kind(other) == same_kind(label) and paces.get(MEASURED + other)
             and (got := _ratio(paces[other], paces[MEASURED + other]))]
    if not walls:
        return None
    *_, wall, other = max(walls)
    return wall, other


def scaled_paces(paces: dict[str, dict[str, list[float]]], here: str) -> tuple[dict[str, list[float]], dict[str, str]]:
    """`here`'s paces, completed from the other machines of its kind (the same thread count on a CPU): a depth `here`
    never trained takes, with its recipes, one other machine's paces times the two machines' ratio, the seconds
    `here` took for its batches of the depths both trained against the other's for the same batches; the machine
    that trained more batches of those depths first, but this machine's own measured step (measured_paces) before
    any. A machine with no record yet starts from its measured step, scaled to wall time (wall_per_step). A depth
    none of them trained stays unpriced. Returns the paces and, for each depth taken, where from ("AMD EPYC 25/17,
    1 thread x 0.64")."""
    mine = dict(paces.get(here, {}))
    borrowed: dict[str, str] = {}
    if not mine and paces.get(MEASURED + here) and (got := wall_per_step(paces, here)):
        wall, label = got
        for name, (seconds, batches) in paces[MEASURED + here].items():
            mine[name] = [seconds * wall, batches]
            borrowed[depth(name)] = f"{MEASURED + here} x {wall:.2f}, the wall time per step on {label}"
    own = depth_paces(mine)
    ratios = []
    for label, theirs in paces.items():
        if label == here or same_kind(label) != same_kind(here):
            continue
        if got := _ratio(mine, theirs):
            ratios.append((got[0], label, got[1]))
    # this machine's own step, measured, first; then the machine that trained more batches of the shared depths.
    # A depth's recipes are priced from one source, the first that has the depth.
    source: dict[str, str] = {}
    for *_, label, ratio in sorted(ratios, key=lambda r: (r[1] == MEASURED + here, r[0]), reverse=True):
        for name, (seconds, batches) in paces[label].items():
            if depth(name) not in own and source.setdefault(depth(name), label) == label:
                mine[name] = [seconds * ratio, batches]
                borrowed[depth(name)] = f"{label} x {ratio:.2f}"
    return mine, borrowed


def machine_paces(results_dir: Path, scale: str) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict]]:
    """Each machine's recorded pace, by label (machine_label): {recipe name: [seconds, batches]} over its
    stretches of training (seconds per batch, recorded_stretches), CPU stretches at one thread
    count (a CPU's pace differs with its threads), GPU stretches with CUDA graphs or without; and each label's
    machine: its full words and the runs it trains at once. CPU stretches of before threads were kept tell no
    pace."""
    records = [r for r in load_records(results_dir, scale) if not r.get("overrides") and r.get("duration_s")]
    paces: dict[str, dict[str, list[float]]] = {}
    machines: dict[str, dict] = {}
    for s in recorded_stretches(records + calibration_timings(results_dir, scale)):
        if not s["gpus"] and not s["threads"]:
            continue
        label = machine_label(s)
        machines[label] = {"words": s["where"], "at_once": s["at_once"]}
        total = paces.setdefault(label, {}).setdefault(s["recipe"], [0.0, 0])
        total[0], total[1] = total[0] + s["seconds"], total[1] + s["batches"]
    return paces, machines


def missing_compute(results_dir: Path, scale: str, rows: list[dict],
                    known: tuple[dict, dict] | None = None) -> tuple[list[dict], dict[str, str]]:
    """What the missing runs `rows` cost, per task and depth, on each machine the records have trained on
    (`known`: machine_paces, read when not given): at that machine's pace of the same recipe, else of its task and
    depth. A depth that never trained on a machine is not priced there: a deep model's cost is not guessed from a
    shallow one's. Training only: evaluation adds minutes.
    Returns rows of task, depth, runs, {machine label: seconds} and {machine label: [seconds of each run]}, and each
    label's machine (machine_paces)."""
    paces, machines = known or machine_paces(results_dir, scale)
    out: list[dict] = []
    for r in rows:
        task, group = r["task"], r["group"]
        row = next((x for x in out if (x["task"], x["depth"]) == (task, group)), None)
        if row is None:
            row = {"task": task, "depth": group, "runs": 0, "each": {}}
            out.append(row)
        row["runs"] += len(r["seeds"])
        length = recipe_batches(r["recipe"], scale) * recipe_updates(r["recipe"], scale)
        for label, recorded in paces.items():
            if pace := pace_of(recorded, r["recipe"]):
                row["each"].setdefault(label, []).extend([length * pace[0] / pace[1]] * len(r["seeds"]))
    for row in out:
        row["seconds"] = {label: sum(each) for label, each in row["each"].items()}
    return out, machines


def grid_cost(scale: str, runs: list[tuple[str, int]], results_dir: Path, threads: int, jobs: int,
              cuda_graphs: bool = False) -> str:
    """What training `runs` (recipe name, batches of its recipe's size) costs, at the paces the records kept
    (machine_paces, seconds per batch of the recipe, else of its depth): on this machine at
    `threads` threads, with its wall time `jobs` at once; else, where no record prices them all here, on the
    fastest machine that does."""
    if not runs:
        return "nothing to train"
    paces, _ = machine_paces(results_dir, scale)
    here = here_label(threads, cuda_graphs)

    def priced(label: str) -> list[float] | None:
        out = []
        for name, batches in runs:
            pace = pace_of(paces.get(label, {}), name)
            if pace is None:
                return None
            out.append(batches * pace[0] / pace[1])
        return out

    if (mine := priced(here)) is not None:
        return (f"about {sum(mine) / 3600:.1f} h of training on this machine ({here}), "
                f"{wall_time(mine, jobs) / 3600:.1f} h of wall time {jobs} at once, from the paces the records kept")
    elsewhere = {label: sum(x) for label in paces if (x := priced(label)) is not None}
    if not elsewhere:
        return f"no record keeps a pace of these recipes or their depths, here ({here}) or elsewhere"
    best = min(elsewhere, key=elsewhere.get)
    return (f"no record prices them on this machine ({here}); on {best}, about {elsewhere[best] / 3600:.1f} h of "
            f"training")
