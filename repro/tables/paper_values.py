"""The paper's numbers, typed from shared/paper/takase2022-b2t-arxiv.txt (English, arXiv v1, the default) and
takase2022-b2t-nlp2022-ja.txt (Japanese workshop version). FAILED marks "Training failed".

Known errata, kept as printed:
- English Table 9's 18L-18L "B2T connection" row repeats Table 1's 60L-12L B2T row (24.75 ... 27.33), not
  Table 1's 18L-18L B2T row (24.62 ... 27.30).
- The Japanese Table 1 reports only newstest2013-2016, and its 18L-18L B2T row differs from the English one
  (26.53 28.41 30.21 34.29, average 29.86 over four years).
"""

from repro.model.variants import EXTENSION

FAILED = "Training failed"

NEWSTEST = ["2010", "2011", "2012", "2013", "2014", "2015", "2016", "Average"]
ROUGE = ["R-1", "R-2", "R-L"]
LM = ["Valid", "Test"]
ASR = ["Dev clean", "Dev other", "Test clean", "Test other"]

# table -> group -> method -> values in column order (None where the paper prints nothing: N/A after a failure)
EN = {
    1: {"6L-6L": {"post_ln": [24.27, 22.06, 22.43, 26.11, 27.13, 29.70, 34.40, 26.59],
                  "pre_ln": [24.03, 21.77, 22.08, 25.63, 26.27, 29.07, 33.84, 26.10],
                  "b2t": [24.12, 21.93, 22.29, 26.31, 26.84, 29.48, 34.73, 26.53]},
        "18L-18L": {"post_ln": FAILED,
                    "pre_ln": [24.07, 21.98, 22.40, 26.28, 27.36, 29.74, 34.16, 26.57],
                    "b2t": [24.62, 22.51, 22.86, 26.74, 28.48, 30.99, 34.93, 27.30]},
        "60L-12L": {"post_ln": FAILED,
                    "pre_ln": [23.99, 21.99, 22.65, 26.42, 27.96, 29.45, 32.49, 26.42],
                    "b2t": [24.75, 22.88, 23.09, 27.12, 28.82, 30.99, 33.64, 27.33]}},
    2: {"6L-6L": {"post_ln": [38.57, 19.37, 35.79], "pre_ln": [38.27, 19.29, 35.39], "b2t": [38.43, 19.37, 35.72]},
        "18L-18L": {"post_ln": FAILED, "pre_ln": [38.97, 19.94, 35.99], "b2t": [39.61, 20.28, 36.66]}},
    3: {"6L": {"post_ln": [20.24, 21.22], "pre_ln": [20.98, 21.93], "b2t": [20.50, 21.47]},
        "16L": {"post_ln": FAILED, "pre_ln": [18.53, 19.24], "b2t": [18.38, 19.20]}},
    4: {"6L-6L": {"post_ln": [3.78, 8.76, 4.19, 8.74], "pre_ln": [3.89, 9.69, 4.22, 9.65],
                  "b2t": [3.69, 8.97, 3.86, 8.94]},
        "12L-6L": {"post_ln": FAILED, "pre_ln": [3.21, 7.91, 3.49, 8.22], "b2t": [3.26, 7.74, 3.48, 7.68]}},
    5: {"6L-6L": {"dlcl": [23.94, 22.00, 22.24, 26.11, 27.37, 29.71, 34.26, 26.52],
                  "t_fixup": [24.09, 21.98, 22.04, 25.96, 26.92, 29.45, 34.56, 26.43],
                  "deepnet": [24.08, 21.76, 22.09, 25.90, 26.85, 29.62, 34.39, 26.38],
                  "admin": [24.32, 21.79, 22.17, 26.26, 27.14, 29.61, 34.12, 26.49],
                  "b2t": [24.12, 21.93, 22.29, 26.31, 26.84, 29.48, 34.73, 26.53]},
        "18L-18L": {"dlcl": [24.20, 22.51, 22.83, 26.59, 27.97, 30.24, 33.98, 26.90],
                    "t_fixup": [24.45, 22.29, 22.76, 26.57, 27.71, 30.13, 34.69, 26.94],
                    "deepnet": [24.70, 22.40, 22.92, 26.85, 28.21, 30.60, 34.25, 27.13],
                    "admin": [24.56, 22.17, 22.62, 26.48, 27.99, 30.35, 33.88, 26.86],
                    "b2t": [24.62, 22.51, 22.86, 26.74, 28.48, 30.99, 34.93, 27.30]}},
    6: {"6L-6L": {"dlcl": [38.13, 18.49, 35.00], "t_fixup": [38.11, 19.13, 35.32], "deepnet": [38.27, 18.89, 35.34],
                  "admin": [37.96, 18.93, 35.05], "b2t": [38.43, 19.37, 35.72]},
        "18L-18L": {"dlcl": [38.25, 19.44, 35.57], "t_fixup": [39.15, 19.97, 36.34],
                    "deepnet": [39.27, 19.97, 36.41], "admin": [39.10, 20.08, 36.30], "b2t": [39.61, 20.28, 36.66]}},
    9: {"6L-6L": {"b2t": [24.12, 21.93, 22.29, 26.31, 26.84, 29.48, 34.73, 26.53],
                  "b2t_noln": [24.17, 22.07, 22.24, 25.83, 26.96, 29.70, 34.42, 26.48]},
        "18L-18L": {"b2t": [24.75, 22.88, 23.09, 27.12, 28.82, 30.99, 33.64, 27.33],  # erratum: Table 1's 60L-12L row
                    "b2t_noln": [24.47, 22.37, 22.58, 27.04, 28.34, 30.49, 34.38, 27.10]}},
    10: {"6L-6L": {"b2t": [38.43, 19.37, 35.72], "b2t_noln": [38.63, 19.75, 35.77]},
         "18L-18L": {"b2t": [39.61, 20.28, 36.66], "b2t_noln": [39.29, 20.01, 36.48]}},
}

# Table 11 (extension, not in the paper): the paper's own rows for its baselines; none of the newer methods reports
# WMT En-De encoder-decoder BLEU at these depths, so their paper column stays empty.
EN[11] = {group: {m: EN[1][group].get(m) for m in ("post_ln", "pre_ln", *EXTENSION, "b2t")}
          for group in ("6L-6L", "18L-18L", "60L-12L")}

ERRATA = {
    9: "The paper's Table 9 18L-18L B2T row repeats Table 1's 60L-12L B2T row; Table 1's 18L-18L B2T average is 27.30.",
}

JA_NEWSTEST = ["2013", "2014", "2015", "2016", "Average"]
JA = {
    1: {"6L-6L": {"post_ln": [26.11, 27.13, 29.70, 34.40, 29.34], "pre_ln": [25.63, 26.27, 29.07, 33.84, 28.70],
                  "dlcl": [26.11, 27.37, 29.71, 34.26, 29.36], "admin": [26.26, 27.14, 29.61, 34.12, 29.28],
                  "b2t": [26.31, 26.84, 29.48, 34.73, 29.34]},
        "18L-18L": {"post_ln": FAILED, "pre_ln": [26.28, 27.36, 29.74, 34.16, 29.38],
                    "dlcl": [26.59, 27.97, 30.24, 33.98, 29.70], "admin": [26.48, 27.99, 30.35, 33.88, 29.67],
                    "b2t": [26.53, 28.41, 30.21, 34.29, 29.86]}},
    2: {"6L-6L": {"post_ln": [38.57, 19.37, 35.79], "pre_ln": [38.27, 19.29, 35.39], "dlcl": [38.13, 18.49, 35.00],
                  "admin": [37.96, 18.93, 35.05], "b2t": [38.43, 19.37, 35.72]},
        "18L-18L": {"post_ln": FAILED, "pre_ln": [38.97, 19.94, 35.99], "dlcl": [38.25, 19.44, 35.57],
                    "admin": [39.10, 20.08, 36.30], "b2t": [39.61, 20.28, 36.66]}},
    4: EN[4],  # the Japanese version's Table 3 (LibriSpeech) equals the English Table 4
}
JA_TABLE_NUMBERS = {1: "表1", 2: "表2", 4: "表3"}

# Table 7: hyper-parameters per task (MT, summarisation, LM, ASR)
TABLE7 = {
    "Hidden dim size": [512, 512, 1024, 512], "FFN dim size": [2048, 2048, 4096, 2048],
    "Attention heads": [8, 8, 8, 8], "Learning rate": [0.001, 0.001, 0.001, 0.001],
    "Scheduler": ["inverse sqrt"] * 4, "Adam β": ["(0.9, 0.98)"] * 4,
    "Warmup updates": [4000, 4000, 2000, 4000], "Max updates": [50000, 50000, 50000, 150000],
    "Max tokens / GPU": [3584, 3584, 1024, 40000],
}
# Table 8: GPUs and hours per model
TABLE8 = {"mt": {"6L-6L": (128, 5), "18L-18L": (128, 13)}, "summarization": {"6L-6L": (64, 4), "18L-18L": (144, 17)},
          "lm": {"6L": (128, 4), "16L": (192, 7)}, "asr": {"6L-6L": (32, 22), "12L-6L": (32, 34)}}
