"""Which recipe fills each cell of Tables 1-6, 9 and 10, and which metric each column reads from a run's record.

Recipe names are paths below recipes/ without .yaml. Table 7 is rendered from the recipes themselves and
Table 8 from the runs' recorded hardware and time (repro/tables/render.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.model.variants import EXTENSION, VARIANTS
from repro.tables import paper_values as pv

TITLES = {v.name: v.title for v in VARIANTS.values()}  # a row's name in every table: the variant's own title


@dataclass(frozen=True)
class TableSpec:
    number: int
    title: str
    task: str
    columns: list[str]
    groups: dict[str, list[str]]      # group (depth) -> methods in row order
    recipe_folder: str                # "" for MT, else gigaword / wikitext103 / librispeech
    group_label: str                  # "Enc-Dec" or "Dec"

    def recipe_name(self, group: str, method: str) -> str:
        return f"{self.recipe_folder + '/' if self.recipe_folder else ''}{group}-{method}"

    def metric_paths(self, column: str) -> list[list[str]]:
        """Where a column's value sits in a record's metrics; the first path present is used."""
        if self.task == "mt":
            return [["bleu_average"] if column == "Average" else ["splits", f"newstest{column}", "bleu"]]
        if self.task == "summarization":
            return [["splits", "test", {"R-1": "rouge1", "R-2": "rouge2", "R-L": "rougeL"}[column]]]
        if self.task == "lm":
            return [["splits", {"Valid": "valid", "Test": "test"}[column], "perplexity"]]
        split = column.lower().replace(" ", "-")
        paths = [["splits", split, "wer"]]
        if split.endswith("-clean"):  # the mini speech corpus has one dev and one test set (held-out voices)
            paths.append(["splits", split.split("-")[0], "wer"])
        return paths


def _spec(number, title, task, columns, folder, label, groups):
    return TableSpec(number, title, task, columns, groups, folder, label)


T1 = ["post_ln", "pre_ln", "b2t"]
T5 = ["dlcl", "t_fixup", "deepnet", "admin", "b2t"]
T11 = ["post_ln", "pre_ln", *EXTENSION, "b2t"]  # every variant beyond the paper's, between the baselines and B2T
SPECS = {
    1: _spec(1, "BLEU on WMT newstest2010-2016 and their average", "mt", pv.NEWSTEST, "", "Enc-Dec",
             {"6L-6L": T1, "18L-18L": T1, "60L-12L": T1}),
    2: _spec(2, "ROUGE F1 on Gigaword headline generation", "summarization", pv.ROUGE, "gigaword", "Enc-Dec",
             {"6L-6L": T1, "18L-18L": T1}),
    3: _spec(3, "Perplexity on WikiText-103", "lm", pv.LM, "wikitext103", "Dec", {"6L": T1, "16L": T1}),
    4: _spec(4, "Word error rates on LibriSpeech", "asr", pv.ASR, "librispeech", "Enc-Dec",
             {"6L-6L": T1, "12L-6L": T1}),
    5: _spec(5, "BLEU: comparison with recent methods", "mt", pv.NEWSTEST, "", "Enc-Dec",
             {"6L-6L": T5, "18L-18L": T5}),
    6: _spec(6, "ROUGE F1: comparison with recent methods", "summarization", pv.ROUGE, "gigaword", "Enc-Dec",
             {"6L-6L": T5, "18L-18L": T5}),
    9: _spec(9, "BLEU of B2T without layer normalisation", "mt", pv.NEWSTEST, "", "Enc-Dec",
             {"6L-6L": ["b2t", "b2t_noln"], "18L-18L": ["b2t", "b2t_noln"]}),
    10: _spec(10, "ROUGE F1 of B2T without layer normalisation", "summarization", pv.ROUGE, "gigaword", "Enc-Dec",
              {"6L-6L": ["b2t", "b2t_noln"], "18L-18L": ["b2t", "b2t_noln"]}),
    # Beyond the paper: the placements proposed since, on the paper's MT setting (repro/model/variants.py)
    11: _spec(11, "BLEU of the normalisation placements proposed since (extension)", "mt", pv.NEWSTEST, "",
              "Enc-Dec", {"6L-6L": T11, "18L-18L": T11, "60L-12L": T11}),
}


def paper_value(number: int, group: str, method: str, column_index: int, version: str = "en"):
    values = (pv.EN if version == "en" else pv.JA)[number][group].get(method)
    if values is None or values == pv.FAILED:
        return values
    return values[column_index]


def all_recipe_names() -> list[str]:
    return sorted({s.recipe_name(g, m) for s in SPECS.values() for g, ms in s.groups.items() for m in ms})
