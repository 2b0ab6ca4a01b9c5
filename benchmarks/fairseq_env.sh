#!/bin/bash
# A separate Python 3.10 environment with fairseq 0.12.2 (torch 2.4.1, numpy < 2), for
# benchmarks/fairseq_compare.py. Not one of lnrepro's dependencies. fairseq is used from its source tree, without
# building its optional C++/Cython extensions (training a Transformer from Python needs none of them).
#
#   bash benchmarks/fairseq_env.sh [ENV_DIR] [PYTHON3.10]     # default .fairseq-env, python3.10
set -euo pipefail
env_dir=${1:-.fairseq-env}
python=${2:-python3.10}
"$python" -m venv "$env_dir"
pip="$env_dir/bin/pip"
"$pip" install -q "pip<24.1"
"$pip" install -q "numpy<2" "torch==2.4.1" "hydra-core>=1.0.7,<1.1" "omegaconf<2.1" bitarray regex \
    "sacrebleu>=1.4.12" tqdm cffi cython wheel setuptools
mkdir -p "$env_dir/src"
"$pip" download -q --no-deps --no-build-isolation --no-binary fairseq fairseq==0.12.2 -d "$env_dir/src"
tar xzf "$env_dir/src/fairseq-0.12.2.tar.gz" -C "$env_dir/src"
echo '__version__ = "0.12.2"' > "$env_dir/src/fairseq-0.12.2/fairseq/version.py"  # setup.py would write it
site=$("$env_dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$(cd "$env_dir/src/fairseq-0.12.2" && pwd)" > "$site/fairseq-src.pth"
"$env_dir/bin/python" -c "import fairseq, torch; print('fairseq', fairseq.__version__, 'torch', torch.__version__)"
