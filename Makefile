# mrc-testbed: every target installs what it needs first (idempotent).
# Run as root on Debian 12.
SHELL      := /bin/bash
VENV       := .venv
PY         := $(VENV)/bin/python
# Debian packages by what they are for (make setup prints one line per group it installs).
APT_FABRIC := mininet iproute2 nftables python3-nftables ethtool procps
APT_TOOLS  := iperf3 iputils-ping traceroute tmux
APT_BPF    := clang llvm libbpf-dev
APT_BUILD  := python3-venv gcc python3-dev libisal-dev libclang-rt-14-dev
APT_SSH    := openssh-server
APT_PKGS   := $(APT_FABRIC) $(APT_TOOLS) $(APT_BPF) $(APT_BUILD) $(APT_SSH)
APT_LOG    := .setup-apt.log
SCENARIO   ?= scenarios/core-link-failure.yaml
TOPO       ?= topologies/fat-tree-k4.yaml
PYTEST_ARGS ?=

.PHONY: setup torch run reproduce reproduce-full report up test test-unit test-netns test-e2e bench validate lint docs sanitize fuzz clean distclean

setup: .stamp-apt .stamp-venv

# Says what it installs before it does (one line per group), and sends apt's and dpkg's output
# to $(APT_LOG): its last lines are printed if the installation fails.
.stamp-apt: Makefile | .stamp-apt-venv .stamp-apt-probe
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	group() { label=$$1; shift; sel=""; for p in "$$@"; do case " $$missing " in *" $$p "*) sel="$$sel $$p";; esac; done; \
	          [ -z "$$sel" ] || echo "  $$label:$$sel"; }; \
	if [ -n "$$missing" ]; then \
	  echo "make setup: installing Debian packages (apt and dpkg output: $(APT_LOG))"; \
	  group "the fabric (Mininet, netlink, nftables)" $(APT_FABRIC); \
	  group "traffic and the interactive CLI" $(APT_TOOLS); \
	  group "the switch program (BPF)" $(APT_BPF); \
	  group "the virtualenv and the native engine's build" $(APT_BUILD); \
	  group "SSH for the across-servers tests (starts sshd)" $(APT_SSH); \
	  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; } \
	       >$(APT_LOG) 2>&1; then \
	    tail -n 20 $(APT_LOG); echo "make setup: apt-get failed; its whole output is in $(APT_LOG)"; exit 1; \
	  fi; \
	fi
	@touch $@

# The venv is made from Debian's /usr/bin/python3 with --system-site-packages:
# Debian's Mininet module lives in /usr/lib/python3/dist-packages. pip install -e also builds
# the native MRC engine (agents/mrc/_core, from agents/mrc/core/), so its sources are inputs.
NATIVE_SRC := setup.py agents/mrc/_core.pyx $(wildcard agents/mrc/_core_*.pxi agents/mrc/core/*.c agents/mrc/core/*.h)
.stamp-venv: pyproject.toml $(NATIVE_SRC) | .stamp-apt-venv
	@[ -x $(PY) ] || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	@echo "make setup: the virtualenv $(VENV) (pip install -e '.[dev]': the testbed, its libraries, the native engine)"
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# PyTorch for the real jobs (a command job run by the testbed's python, and the tests): the CPU
# build this machine's pip finds; elsewhere e.g. TORCH_SPEC=torch==2.5.1 and
# TORCH_PIP="--index-url https://download.pytorch.org/whl/cpu" (PyPI's Linux wheel is the CUDA
# build, several GB). Installed only when a scenario or the tests need it.
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP  ?=
.stamp-torch: .stamp-venv
	@echo "make setup: PyTorch for the real jobs ($(TORCH_SPEC) into $(VENV): a command job or the tests need it)"
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIP) '$(TORCH_SPEC)'
	@touch $@

torch: .stamp-torch

# The main job: run a scenario (default: core-link-failure, mrc vs rc vs tcp) and
# print the side-by-side report; the run directory goes to runs/. A scenario whose command job
# runs the testbed's python gets PyTorch first (testbed validate --needs).
run: setup
	@if $(PY) -m testbed validate --needs $(SCENARIO) | grep -qx torch; then $(MAKE) --no-print-directory .stamp-torch; fi
	$(PY) -m testbed run $(SCENARIO)

# The MRC paper's claims, scaled (scenarios/paper/claims.yaml): the quick suite, 1 trial per
# claim and its control (~40 min on 2 cores); results in runs/reproduce-quick/ (an interrupted suite resumes).
# CLAIMS=a,b runs only those; reproduce-full runs each claim's trials (runs/reproduce/).
reproduce: setup
	$(PY) -m testbed reproduce --quick $(if $(CLAIMS),--claims $(CLAIMS))

reproduce-full: setup
	$(PY) -m testbed reproduce $(if $(CLAIMS),--claims $(CLAIMS))

report: setup
	$(PY) -m testbed report $(RUN)

up: setup
	$(PY) -m testbed up $(TOPO)

# Needs the virtualenv and what the validator's kernel probe runs, not all of `make setup` (no
# Mininet, no sshd): its verdicts are those of a set-up machine's (ip for SRv6 next-csid, nft for
# loss, clang and libbpf for the switch program that ECN and trimming need).
validate: .stamp-venv .stamp-apt-probe
	$(PY) -m testbed validate topologies/*.yaml scenarios/*.yaml scenarios/paper/*.yaml

# The Debian packages the virtualenv needs (python3-venv; gcc, python3-dev and libisal-dev for the
# native engine's build) and those of the kernel probe (above); `make setup` installs them first.
APT_VENV  := python3-venv gcc python3-dev libisal-dev
APT_PROBE := iproute2 nftables clang llvm libbpf-dev
# $(call apt_install,PACKAGES,WHAT FOR): install the missing ones (output to $(APT_LOG)), touch the stamp.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing Debian packages for $(2):$$missing (apt and dpkg output: $(APT_LOG))"; \
	  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; } \
	       >$(APT_LOG) 2>&1; then \
	    tail -n 20 $(APT_LOG); echo "make: apt-get failed; its whole output is in $(APT_LOG)"; exit 1; \
	  fi; \
	fi
	@touch $@
endef
.stamp-apt-venv: Makefile
	$(call apt_install,$(APT_VENV),the virtualenv and the native engine's build)
.stamp-apt-probe: Makefile | .stamp-apt-venv
	$(call apt_install,$(APT_PROBE),the kernel probe of testbed validate)

test: setup .stamp-torch
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests

test-unit: setup .stamp-torch
	$(PY) -m pytest $(PYTEST_ARGS) tests/unit

test-netns: setup
	$(PY) -m pytest $(PYTEST_ARGS) tests/netns

test-e2e: setup .stamp-torch
	$(PY) -m pytest $(PYTEST_ARGS) tests/e2e

# Static checks (pyflakes + pycodestyle errors, see [tool.ruff] in pyproject.toml) and the layers of
# testbed/ (import-linter contracts in pyproject.toml); CI runs it first.
lint: setup
	$(PY) -m ruff check testbed agents tests
	$(VENV)/bin/lint-imports

# The native engine under AddressSanitizer and UBSan: a separate build in build/sanitize/ (with the
# venv's Cython, a dev extra) that the engine-comparison tests (tests/unit/test_native_*.py) load
# through MRC_NATIVE_LIB. LeakSanitizer checks at exit: PYTHONMALLOC=malloc so that it sees every
# Python object (pymalloc's mmap'd arenas hide references), suppressions for CPython's own
# leftovers only (agents/mrc/core/lsan.supp), orjson and numpy imported with LSan off
# (tests/lsan_plugin.py). Both make the random scenarios several times slower than pyproject's
# per-test timeout allows: --timeout=900.
SAN_DIR    := build/sanitize
SAN_RT     := $(shell gcc -print-file-name=libasan.so):$(shell gcc -print-file-name=libubsan.so)
sanitize: setup
	MRCN_SANITIZE=1 $(PY) setup.py -q build_clib -f --build-clib $(SAN_DIR)/tmp --build-temp $(SAN_DIR)/tmp \
	  build_ext -f --build-lib $(SAN_DIR)/lib --build-temp $(SAN_DIR)/tmp
	LD_PRELOAD=$(SAN_RT) PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/agents/mrc/core/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 \
	  MRC_NATIVE_REQUIRE=1 MRC_NATIVE_LIB=$$(ls $(SAN_DIR)/lib/agents/mrc/_core*.so) \
	  $(PY) -m pytest -p no:cacheprovider -p tests.lsan_plugin -q --timeout=900 $(PYTEST_ARGS) tests/unit/test_native_*.py

# libFuzzer (clang, ASan + UBSan) on the native decoder and on one QP fed datagrams, each for
# FUZZ_SECONDS (default 60).
FUZZ_SECONDS ?= 60
# Then the engine-comparison tests' random scenarios from a random seed (MRC_FUZZ_RANDOM=1: new
# examples each run; make test runs them derandomized). 300 examples take 1-3 min per engine
# pair, more on a busy machine: the unit tier's 60 s per test would cut them off.
fuzz: setup
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash agents/mrc/core/fuzz.sh
	MRC_FUZZ_RANDOM=1 $(PY) -m pytest -p no:cacheprovider -q --timeout=900 $(PYTEST_ARGS) tests/unit/test_native_qp.py -k "random and agree"

# The documentation site (mkdocs.yml, pages under docs/): strict, so a broken link or a page
# missing from the nav fails; the site goes to site/ (git-ignored). CI builds it after lint.
docs: setup
	$(PY) -m mkdocs build --strict --site-dir site

bench: setup
	$(PY) -m testbed.tools.bench

clean: setup
	$(PY) -m testbed clean

distclean:
	rm -rf $(VENV) .stamp-* *.egg-info site .setup-apt.log
