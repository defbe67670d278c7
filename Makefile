# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts pytest screenshots bench faults clean

# setuptools warns about an editable install beside a folder of the package's name (tui/ and widgets/ are installed
# as rlwatch.tui and rlwatch.widgets on purpose): a block of asterisks before the dashboard opens says nothing to
# the person who typed `make demo`, so that one warning is silenced.
# Cython's dependency scan does not follow `from rlwatch.logs cimport textscan`: after a .pxd changed, the C it
# generated is removed so that every module cimporting it is generated again.
$(STAMP): pyproject.toml setup.py rlwatch/logs/_newlines.c rlwatch/logs/_eventpath.pyx \
		$(wildcard rlwatch/logs/*.pxd) $(patsubst %.pxd,%.py,$(wildcard rlwatch/logs/*.pxd))
	$(if $(filter %.pxd,$?),rm -f $(patsubst %.pxd,%.c,$(wildcard rlwatch/logs/*.pxd)) rlwatch/logs/_eventpath.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	@$(PY) -m compileall -q rlwatch tui widgets >/dev/null
	$(VENV)/bin/rlwatch demo

lint: $(STAMP)
	$(VENV)/bin/ruff check rlwatch tui widgets tests bench
	$(VENV)/bin/ruff format --check rlwatch tui widgets tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

contracts: $(STAMP)
	$(VENV)/bin/lint-imports

# The in-process tests run on two workers (pytest-xdist), and so do the end-to-end tests (real processes, a
# simulator, a watchdog: `slow`), which mostly wait on what they started (about a third of a core each); the
# fault-injection suite (`faults`, whose table is printed at its end by one session-wide plugin) runs one at a time.
# All three always run; any failing fails the target. Then the log and engine tests run again with the compiled
# event path off (RLWATCH_NATIVE=0), as msgpack runs its suite on both of its paths: until every per-line rule is
# compiled from its one Python text, the Python path is a second implementation that users without a compiler run,
# and test_native_equivalence alone does not reach every rule the other tests check. The sources are compiled to
# bytecode first, as an install does: where PYTHONDONTWRITEBYTECODE is set (many containers set it) every rlwatch
# process a test starts would compile them again, a third of a second of CPU each.
pytest: $(STAMP)
	@$(PY) -m compileall -q rlwatch tui widgets tests bench >/dev/null
	@status=0; \
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow and not faults" -n 2 || status=1; \
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "slow and not faults" -n 2 || status=1; \
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "faults" || status=1; \
	RLWATCH_NATIVE=0 $(VENV)/bin/pytest -q -p no:cacheprovider -m "not faults" -n 2 tests/logs tests/engine || status=1; \
	exit $$status

test: lint typecheck contracts pytest

SCENARIOS := healthy server-crash restart-loop memory-leak gpu-zombie startup-crash trl-colocated nccl-timeout hang \
             gpu-xid shm-small nan-loss kernel-oom

# One SVG per simulated incident, rendered headlessly by the real command; PNGs too where rsvg-convert exists.
# The README's pictures at 120x40, and every scenario at the smallest size supported (80x24) and a big one (200x60).
screenshots: $(STAMP)
	@mkdir -p screenshots/80x24 screenshots/120x40 screenshots/200x60
	@for s in $(SCENARIOS); do \
	  $(VENV)/bin/rlwatch snapshot --demo --scenario $$s --out "screenshots/{size}/$$s.svg" \
	    --size 120x40,80x24,200x60 || exit 1; \
	  mv screenshots/120x40/$$s.svg screenshots/$$s.svg; \
	  if command -v rsvg-convert >/dev/null; then \
	    rsvg-convert -w 1600 -o screenshots/$$s.png screenshots/$$s.svg; fi; \
	done; rmdir screenshots/120x40

# The benchmarks measure the optional Hyperscan fast path too, so it is installed first.
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[test,fast]'
	$(PY) -m bench

# Every injected fault, then a table: fault, expected behaviour, observed, pass/fail (RLWATCH_FAULTS_JSON=FILE keeps it).
faults: $(STAMP)
	$(PY) -m pytest -q -m faults -p tests.faults.table -p no:cacheprovider

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
