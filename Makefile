# Quick start: `make demo` and `make test`; each sets up .venv first (idempotent).
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: install demo test test-fast clean

$(STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -c "import torch, torchaudio; torchaudio.compliance.kaldi.fbank(torch.randn(1, 16000), num_mel_bins=80); print('torch', torch.__version__, 'torchaudio', torchaudio.__version__, 'ok')"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	.venv/bin/lnrepro table 1 --scale mini
	.venv/bin/lnrepro figure 3 --out figures/figure3.png --json figures/figure3.json
	@echo "Next: source .venv/bin/activate  (puts lnrepro on the PATH), then"
	@echo "      reproduce a table:  lnrepro reproduce 1 --scale mini --plan  (README: Reproduce a table)"
	@echo "      read the results:   docs/results-mini.md  (every table, claim, figure and run at mini)"

test: $(STAMP)  # two test processes: most tests use one core
	$(PY) -m pytest -q -p no:cacheprovider -n 2

test-fast: $(STAMP)  # leaves out the tests that start real training processes
	$(PY) -m pytest -q -p no:cacheprovider -n 2 -m 'not slow and not gpu'

clean:
	rm -rf .venv figures runs
