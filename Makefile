# Two commands from nothing: `make demo` and `make test` (both create .venv from the pinned requirements).
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1

$(VENV)/.installed: requirements.txt requirements-triton-server.txt
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: the harness needs Python >= 3.11; python3 is $$(python3 -V 2>&1): put a newer python3 first on PATH" >&2; exit 2; }
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps -r requirements-triton-server.txt  # tritonserver (Triton tests, serve)
	$(VENV)/bin/pip install --quiet --no-deps --target $(VENV)/triton-stub numpy==1.26.4  # the python backend stub's numpy
	touch $@

.PHONY: demo test notebooks clean
demo: $(VENV)/.installed  ## compare the offline GPT2 default on PyTorch and ONNX Runtime
	$(PY) run.py compare GPT2 --compare frameworks onnxrt --use-cache --working-dir temp

# The suite runs in two processes (pytest-xdist, one per core); --dist loadfile keeps each file's tests on one
# process, so a module's fixtures are built once, and the three Triton files share one process and one server
# (tests/conftest.py). Both processes share one working dir for the offline models and exports (`workdir`).
test: $(VENV)/.installed  ## the test suite (CPU, offline, two processes; budget 20 minutes on 2 cores; the 25 slowest tests listed)
	$(PY) -m pytest -q -n 2 --dist loadfile tests --durations=25

notebooks: $(VENV)/.installed  ## execute every notebook (the venv's kernel, nbclient) into temp/notebooks/ with outputs
	$(PY) tests/test_notebooks.py temp/notebooks

clean:
	rm -rf temp .pytest_cache
