# `make test` and `make demo` create .venv and install the project on first use;
# later runs skip the install unless pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export NO_ALBUMENTATIONS_UPDATE := 1

.PHONY: test demo lint install

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/defect-detector demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
