# `make test` and `make demo` create .venv and install the project on first use, pinned by constraints.txt;
# later runs skip the install unless pyproject.toml or constraints.txt changed. pip runs -qq: errors only, not the
# warnings of an index folder that a machine's pip configuration names but lacks.
# `make install CONSTRAINTS=` installs without the pins (e.g. on a Python other than constraints.txt's 3.11).
# `make test` runs pytest through .ci/with_postgres: with Debian's postgresql installed (and DEFECT_DETECTOR_TEST_POSTGRES
# unset) it starts a throwaway PostgreSQL server for the station tests and stops it after; without it, one line says so.
# Tests run in parallel, one pytest-xdist worker per core (JOBS=auto), each test file on one worker (--dist loadfile:
# a file's fixtures are built once); `make test JOBS=1` runs them one by one.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONSTRAINTS ?= constraints.txt
EXTRAS ?= dev,onnx,station
PYTEST_ARGS ?=
JOBS ?= auto
export NO_ALBUMENTATIONS_UPDATE := 1

.PHONY: test demo lint install

install: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]"
	touch $(STAMP)

test: $(STAMP)
	.ci/with_postgres $(PY) -m pytest -q -n $(JOBS) --dist loadfile $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/defect-detector demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
