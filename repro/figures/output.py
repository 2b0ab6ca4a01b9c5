"""Writing a figure: the PNG (temporary file, then rename) and, when asked, the plotted numbers as JSON."""

from __future__ import annotations

import json
from pathlib import Path


def save_figure(fig, out: Path, json_path: Path | None, data) -> None:
    import matplotlib.pyplot as plt
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=2) + "\n")
