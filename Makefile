# Every target creates and fills .venv itself when it is missing or stale.
# The venv's interpreter: Debian's python3.11 where the machine has it (a build with
# profile-guided optimisation: about 20% less CPU per call to the embedded AWS than the
# unoptimised pyenv build, `bench/speed.py`, so the tests and the soak run faster), else
# python3. `make install PYTHON=...` picks another.
PYTHON ?= $(shell test -x /usr/bin/python3.11 && echo /usr/bin/python3.11 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := local,dev,cdk,spark,duckdb

.PHONY: install demo test lint format bench clean bytecode spark-classes

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip uv
	# uv fetches and installs the packages in parallel (pip one at a time); the same
	# pyproject.toml, the system's certificates. First from uv's cache alone (--offline):
	# online, uv asks the index again about every package, about 25 s of CPU on this
	# machine against 3 s when the cache holds them all; online when the cache cannot
	# satisfy pyproject.toml, pip when uv fails. The .pyc files are written by `make
	# bytecode`, beside the tests' other needs.
	$(BIN)/uv pip install --offline --quiet --native-tls --python $(BIN)/python -e '.[$(EXTRAS)]' \
		2>/dev/null \
		|| $(BIN)/uv pip install --quiet --native-tls --python $(BIN)/python -e '.[$(EXTRAS)]' \
		|| $(BIN)/pip install --quiet --no-compile -e '.[$(EXTRAS)]'
	# The wheel holds the package shardlog only: the handlers, the Spark jobs and the CDK app
	# are imported from this checkout (the local runtime runs the handlers in-process).
	echo "$(CURDIR)" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/shardlog-checkout.pth"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP) bytecode spark-classes
	$(BIN)/shardlog demo --spark

# mypy's cache lives in the user's cache, shared by every checkout of this machine: a clean
# clone's first check took 117 s of CPU, against 2 s with the cache of another checkout.
# mypy trusts a cached module only when its source hashes the same, so the cache can make a
# check faster, never different. MYPY_CACHE_DIR=.mypy_cache keeps it in the checkout.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/shardlog/mypy
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir "$(MYPY_CACHE_DIR)"

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Two workers (this machine has two cores); the tests that share the synthesized stack, and
# those that share the local SparkSession, stay on one worker each (tests/conftest.py).
# spark-archive and lambda-runtime: the tests that run the Spark jobs and the Lambda handlers
# as shipped (docs/DEPLOY.md, "What is proven before you deploy"); both cached in build/.
# What the tests need is made side by side (downloads overlap), each one's output kept
# together. lint runs beside the tests, niced: the tests leave about a quarter of two cores
# idle (they wait on spark-submit, the CDK CLI, the browser), which a cold mypy (about 2 min
# of CPU) fills instead of delaying them; its output follows theirs and either failing fails.
TEST_NEEDS := cdk-cli kclpy spark-archive spark-classes lambda-runtime browser bytecode
PYTEST_WORKERS ?= 2
# The tests run with Python's default bytecode caching even where PYTHONDONTWRITEBYTECODE is
# set (as on this machine and its CI): the Spark archive unpacked once for all the local job
# runs, the Lambda runtime's site and pytest's rewritten test modules are then compiled by the
# first process that imports them, not by every one (the as-shipped Spark runs: 75 s of CPU
# against 58 s). The assets and the archive leave __pycache__ out.
# --durations=25: every run's log names its slowest tests (docs/TESTING.md, "Where the time
# goes").
test:
	$(MAKE) --no-print-directory -j 3 --output-sync=target $(TEST_NEEDS)
	@mkdir -p build
	@echo "make lint runs beside the tests, its output after theirs (build/lint.log)"
	@(nice -n 10 $(MAKE) --no-print-directory lint > build/lint.log 2>&1; echo $$? > build/lint.rc) & \
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25; tests=$$?; wait; \
	echo "--- make lint ---"; cat build/lint.log; lint=$$(cat build/lint.rc); \
	test $$tests = 0 && test $$lint = 0

# The venv's packages and the checkout's own modules as .pyc. Without them, where
# PYTHONDONTWRITEBYTECODE is set (as on this machine and its CI), every Python process
# compiled every module it imported, every time (collecting the tests: 44 s of CPU against
# 29 s). The packages' compile (77 s of CPU) was part of the venv's install, which every
# other step waits for: here it runs beside them, and skips the packages' own test suites
# (a fifth of their modules; a module compiled here or not is the same module). `make
# test`'s set-up on a clean clone: the install 75 s then the rest 44 s before, 36 s then
# 65 s with the compile moved, 42 s then 58 s with the test suites skipped. Python checks
# each .pyc against its source's size and time, so a stale one is never used.
# aws_cdk is 183 of the packages' 324 MB of source, and the CDK app imports a third of it:
# its modules are compiled by importing what the app and its tests import (the jsii
# runtime starts once), not all of them (the packages' compile: 69 s of CPU before, 48 s).
bytecode: $(VENV)/.compiled
	$(BIN)/python -m compileall -q -j 0 shardlog lambdas infra spark_jobs tests bench scripts app.py

$(VENV)/.compiled: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 -x '/tests?/|/aws_cdk/' "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	env -u PYTHONDONTWRITEBYTECODE JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 \
		$(BIN)/python -c 'import infra.stack, aws_cdk.assertions, cdk_nag'
	touch $@

bench: $(STAMP) bytecode
	$(BIN)/python bench/speed.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/dedupe.py
	$(BIN)/python bench/api.py
	$(BIN)/python bench/consume.py
	$(BIN)/python bench/compact.py
	$(BIN)/python bench/lambda_consumer.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/cost.py

# Debian's Chromium and its ChromeDriver, which the console's browser tests drive headless
# (tests/browser, through Selenium): installed with apt-get when missing (as root, else
# through sudo); nothing is downloaded at test time.
.PHONY: browser
browser:
	@if ! test -x /usr/bin/chromium || ! test -x /usr/bin/chromedriver; then \
		sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$sudo apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

# The smoke test of a deployed stack (docs/DEPLOY.md, "Smoke test"): run it after `cdk deploy`,
# with the deployment's credentials and region (AWS_PROFILE, AWS_REGION). The stack is found
# by its CloudFormation outputs; STACK=<name> for a stack deployed under another name.
STACK ?= $(shell $(BIN)/python -c 'from infra.constants import DEFAULT_STACK_NAME as n; print(n)')
.PHONY: smoke
smoke: $(STAMP)
	$(BIN)/shardlog smoke --stack-name $(STACK)

# The fault soak (not part of make test): the model-based machines on fresh random schedules
# across processes; prints schedules, steps, faults by kind and violations (scripts/soak.py).
# SOAK="--minutes 5" for a short run.
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python scripts/soak.py $(or $(SOAK),--minutes 60 --schedules 10000 --processes 3)

# The mutation check: breaks each safety mechanism in a scratch copy and runs the tests that
# guard it (scripts/mutants.py); every mutation must be caught.
.PHONY: mutants
mutants: $(STAMP)
	$(BIN)/python scripts/mutants.py

# docs/PERFORMANCE.md's generated block, regenerated from the benchmarks (quick runs; FULL=1:
# full runs; bench/report.py). README.md and the rest of docs/ are never written.
.PHONY: measured
measured: $(STAMP)
	$(BIN)/python bench/report.py $(if $(FULL),--full)

clean:
	rm -rf $(VENV) .shardlog .pytest_cache .mypy_cache .ruff_cache cdk.out node_modules

# The CDK CLI pinned in package.json / package-lock.json (tests/infra runs `npx cdk synth`).
.PHONY: cdk-cli
cdk-cli: node_modules/.installed

node_modules/.installed: package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# What EMR Serverless runs the Spark jobs with (spark.archives): shardlog's sources plus the
# pinned wheels the jobs import (pyarrow, pandas, numpy, boto3, pydantic, pyiceberg) for EMR's
# Python 3.11 on Amazon Linux 2023 x86_64 (pip, no Docker; cached in build/spark-wheels, and
# not rebuilt while its inputs are the same). `cdk deploy` uploads it when present; synth
# works without it (and warns).
.PHONY: spark-archive bench-compact
spark-archive: $(STAMP)
	$(BIN)/python -m shardlog.spark.archive build/spark/spark_jobs_deps.tar.gz

# The local Spark JVMs' class archive (shardlog/spark/class_archive.py): written once into the
# user's cache (about 45 s of CPU), then every local Spark JVM starts on it (a trivial
# spark-submit: 14.1 s of CPU against 7.2 s). Once a machine, not once a checkout: the JVMs
# run from one copy of pyspark's Spark home in the user's cache (shardlog/spark/spark_home.py).
spark-classes: $(STAMP)
	$(BIN)/python -m shardlog.local.spark_classes

bench-compact: $(STAMP)
	$(BIN)/python bench/compact.py

# The capacity model against a local run of docs/SCALE.md's 64 shards (make test runs the same
# check at 12 shards; tests/functional/local/test_capacity_model.py).
.PHONY: capacity-check
capacity-check: $(STAMP)
	SHARDLOG_CAPACITY_SHARDS=64 $(BIN)/pytest -q -s -p no:randomly \
		tests/functional/local/test_capacity_model.py

# What a deployed Lambda has besides its code: the python3.12 runtime's SDK and the pinned
# Powertools layer's packages (infra/lambda-runtime.txt), in build/lambda-runtime/site.
.PHONY: lambda-runtime
lambda-runtime: $(STAMP)
	$(BIN)/python -m infra.lambda_runtime

# amazon_kclpy, for the tests that run unchanged KCL multi-language record processors under
# `shardlog consume`. Its setup.py downloads KCL's Java jars from Maven when installed, which
# shardlog does not need: only its pure-Python package (stdlib only) is extracted from the
# pinned sdist into the venv. PyPI is used here, at install time; never at test time.
KCLPY_VERSION := 3.2.0
KCLPY_STAMP := $(VENV)/.kclpy-$(KCLPY_VERSION)
KCLPY_SDIST := $(VENV)/kclpy-sdist
KCLPY_SITE = $(shell $(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.PHONY: kclpy
kclpy: $(KCLPY_STAMP)

$(KCLPY_STAMP): $(STAMP)
	rm -rf $(KCLPY_SDIST) "$(KCLPY_SITE)/amazon_kclpy"
	$(BIN)/pip download --quiet --no-deps --no-binary :all: --dest $(KCLPY_SDIST) \
		amazon_kclpy==$(KCLPY_VERSION)
	tar -xzf $(KCLPY_SDIST)/amazon_kclpy-$(KCLPY_VERSION).tar.gz -C "$(KCLPY_SITE)" \
		--strip-components=1 amazon_kclpy-$(KCLPY_VERSION)/amazon_kclpy
	$(BIN)/python -c 'import amazon_kclpy.kcl, amazon_kclpy.v2.processor, amazon_kclpy.v3.processor'
	touch $@
