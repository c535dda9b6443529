# The two commands: `make run` and `make test`. Each does all of its own set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test lint typecheck unit integration e2e install clean bench bench-queue bench-retention bench-admin bench-providers bench-wal browser chat admin-assets fuzz chaos postgresql-15 pgbouncer nginx fleet test-pg15

## Installs with uv, itself installed by pip into the venv: from a fresh clone, 22 s against
## pip's 63 s here, a fifth of make test's five minutes. pip does it if uv cannot be had.
## --compile-bytecode, as pip does by default: where PYTHONDONTWRITEBYTECODE is set (this
## machine) nothing else writes the .pyc files, and every process the suite starts compiled
## the packages it imports again (a server's start took 1.55 s instead of 0.8).
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check
UV     := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	($(PIP) uv && $(UV) -e '.[dev]') || $(PIP) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Start PostgreSQL (embedded unless DATABASE_URL is set), the server and a worker; the chat
## example is built first where npm is at hand, and served at /chat/ (make run needs no Node).
run: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory chat || \
	  echo "[make run] the chat example could not be built: /chat/ is not served"; \
	else echo "[make run] npm not found: the chat example (/chat/) is not built"; fi
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory admin-assets || \
	  echo "[make run] uPlot could not be installed: /admin/ shows no charts"; \
	else echo "[make run] npm not found: /admin/ shows no charts (make admin-assets)"; fi
	JOBSTREAM_CHAT_PAGE_DIR="$${JOBSTREAM_CHAT_PAGE_DIR-$(CURDIR)/$(CHAT_PAGE)}" $(BIN)/python -m jobstream.devrun

## Debian's Chromium for the browser tests (tests/e2e); Playwright drives it, nothing downloaded.
CHROMIUM := /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

## Debian's PostgreSQL 15, for `make test-pg15`: the suite's own clusters only, so no `main`
## cluster is created (postgresql-common reads createcluster.conf before the package's set-up;
## --force-confold keeps that file where the package would ask whether to replace it).
PG15 := /usr/lib/postgresql/15/bin/postgres
postgresql-15:
	@test -x $(PG15) || (mkdir -p /etc/postgresql-common && \
	  (grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf || \
	   echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf) && \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql-15)

## Debian's PgBouncer (1.18), for the tests through a pooler: each test runs its own pgbouncer
## with its own ini on a free port, never the package's service, which is stopped if the
## package's set-up started it (on a machine whose policy-rc.d allows that).
PGBOUNCER := /usr/sbin/pgbouncer
pgbouncer:
	@test -x $(PGBOUNCER) || ((apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer) && \
	  (invoke-rc.d pgbouncer stop >/dev/null 2>&1 || true))

## Debian's nginx (1.22), for the fleet test: it runs its own nginx on a copy of
## deploy/nginx/jobstream.conf (`daemon off;`, a prefix of its own, a free port), never the
## package's service, which is stopped if the package's set-up started it.
NGINX := /usr/sbin/nginx
nginx:
	@test -x $(NGINX) || ((apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx) && \
	  (invoke-rc.d nginx stop >/dev/null 2>&1 || true))

## The suite's database tests (tests/integration, and tests/unit's few) on Debian's PostgreSQL 15
## instead of the embedded 18 (tests/support/database.py). PYTEST_ARGS: e.g. "-k claims".
test-pg15: $(STAMP) postgresql-15
	JOBSTREAM_TEST_PG=15 $(BIN)/python -m pytest -n 2 --dist loadfile tests/integration tests/unit $(PYTEST_ARGS)

## Lint, then the whole suite with the type check beside it.
## - Our modules are compiled once first: the suite starts servers, workers and CLIs by the
##   hundred, and where PYTHONDONTWRITEBYTECODE is set (this machine) each would compile every
##   module it imports again.
## - Files go out in collection order, the slow end-to-end ones first: xdist's default (most
##   tests first) left the one-test files, the fuzzing and chaos runs among them, to the end,
##   run one after another (a minute's tail).
## - The type check runs beside the suite: the suite waits on processes and keeps about one of
##   two cores busy, and mypy's 30 s fit in the other.
test: $(STAMP) browser pgbouncer nginx chat admin-assets lint
	$(BIN)/python -m compileall -q -j 0 jobstream bench tests/support
	@$(BIN)/mypy > .mypy.out 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder; suite=$$?; \
	wait $$types; typed=$$?; cat .mypy.out; rm -f .mypy.out; \
	test $$suite -eq 0 && test $$typed -eq 0

## The chat example (examples/chat/) and the Node side of its tests: the Vercel AI SDK, React and
## esbuild at the exact versions of examples/chat/package-lock.json, installed by `npm ci` into
## .cache/chat-node/ (again only when the lockfile changes; nothing is fetched at run time), and
## the page bundled into .cache/chat-node/page/, which `make run` serves at /chat/.
CHAT_NODE := .cache/chat-node
CHAT_DEPS := $(CHAT_NODE)/.installed-stamp
CHAT_PAGE := $(CHAT_NODE)/page
CHAT_SRC  := $(wildcard examples/chat/*.jsx examples/chat/*.html examples/chat/*.css)

$(CHAT_DEPS): examples/chat/package.json examples/chat/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make chat: needs Node 20 and npm"; exit 1; }
	mkdir -p $(CHAT_NODE)
	cp examples/chat/package.json examples/chat/package-lock.json $(CHAT_NODE)/
	cd $(CHAT_NODE) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

$(CHAT_PAGE)/app.js: $(CHAT_DEPS) $(CHAT_SRC)
	mkdir -p $(CHAT_PAGE)
	NODE_PATH=$(CHAT_NODE)/node_modules $(CHAT_NODE)/node_modules/.bin/esbuild \
	  examples/chat/app.jsx --bundle --minify --format=esm --jsx=automatic --log-level=warning \
	  --define:process.env.NODE_ENV='"production"' --outfile=$@
	cp examples/chat/index.html examples/chat/chat.css $(CHAT_PAGE)/

chat: $(CHAT_PAGE)/app.js

## The operator dashboard's charts (/admin/, static/admin/): uPlot at the exact version of
## deploy/admin/package-lock.json, installed by `npm ci` into .cache/admin-node/ (again only when
## the lockfile changes) and its two built files copied into static/admin/vendor/ (not committed),
## which the server serves as they are: no build step at run time, no CDN. `make test` needs it;
## `make run` runs it where npm is at hand, and without it the dashboard works but draws no chart.
ADMIN_NODE   := .cache/admin-node
ADMIN_DEPS   := $(ADMIN_NODE)/.installed-stamp
ADMIN_VENDOR := static/admin/vendor
UPLOT_DIST   := $(ADMIN_NODE)/node_modules/uplot/dist

$(ADMIN_DEPS): deploy/admin/package.json deploy/admin/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make admin-assets: needs Node 20 and npm"; exit 1; }
	mkdir -p $(ADMIN_NODE)
	cp deploy/admin/package.json deploy/admin/package-lock.json $(ADMIN_NODE)/
	cd $(ADMIN_NODE) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

$(ADMIN_VENDOR)/uPlot.esm.js: $(ADMIN_DEPS)
	mkdir -p $(ADMIN_VENDOR)
	cp $(UPLOT_DIST)/uPlot.esm.js $(UPLOT_DIST)/uPlot.min.css $(ADMIN_NODE)/node_modules/uplot/LICENSE $(ADMIN_VENDOR)/
	touch $@

admin-assets: $(ADMIN_VENDOR)/uPlot.esm.js

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

e2e: $(STAMP) browser pgbouncer nginx chat admin-assets
	$(BIN)/python -m pytest tests/e2e

## Schemathesis at length against a live server and worker: 12,000+ cases, 6 to 14 minutes
## (`make test` runs ~350 of them). FUZZ_ARGS="--seed N" replays a run.
fuzz: $(STAMP)
	$(BIN)/python -m tests.e2e.fuzz $(FUZZ_ARGS)

## Kill -9 workers every ~2 s, restart servers and PostgreSQL under followed jobs, then check
## every job and every follower (about 3 minutes; `make test` runs a short one). CHAOS_ARGS:
## --seconds (150), --jobs (300), --seed N (replays a run's faults), --compact-after S (the
## workers' JOBSTREAM_COMPACT_AFTER_S, 60: below --seconds, so the janitor compacts finished jobs'
## logs while others run and are followed), e.g. "--seconds 90 --jobs 180 --compact-after 20".
chaos: $(STAMP)
	$(BIN)/python -m tests.e2e.chaos $(CHAOS_ARGS)

## The deployment's topology on real parts (tests/e2e/fleet.py): PostgreSQL, PgBouncer, nginx,
## two servers and three workers; 1,000 jobs and 100 followers through a rolling restart of every
## server and worker and a PostgreSQL restart, then every job and follower checked (about
## 70 s; `make test` runs a short one). FLEET_ARGS: --jobs, --followers, --seconds, --seed.
fleet: $(STAMP) pgbouncer nginx
	$(BIN)/python -m tests.e2e.fleet $(FLEET_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

## One worker's token throughput on each provider's loopback fake, beside the OpenAI path of an
## anchor commit (about 3 minutes; also part of `make bench`). BENCH_ARGS: --repeats N (3),
## --anchor REV (5a6ae60), --profile (where the worker's CPU goes, per token).
bench-providers: $(STAMP)
	$(BIN)/python -m bench.bench_providers $(BENCH_ARGS)

## Retention at scale: a million finished jobs and twenty million events of history (long:
## BENCH_ARGS="--jobs 100000" for a smaller run).
bench-retention: $(STAMP)
	$(BIN)/python -m bench.bench_retention $(BENCH_ARGS)

## The operator's dashboard's reads at a million jobs, p99 per read (bench/bench_admin.py; about
## 5 minutes, most of it the seeding; BENCH_ARGS="--jobs 20000" for a smoke run).
bench-admin: $(STAMP)
	$(BIN)/python -m bench.bench_admin $(BENCH_ARGS)

## jobstream's queue against PgQueuer 1.6.0, side by side (about 20 minutes; BENCH_ARGS=--quick
## for a smoke run). Installs the `bench` extra into the venv first. BENCH_ARGS=--via-pgbouncer:
## instead, jobstream's drain and create rows direct and through PgBouncer (about 5 minutes;
## needs `make pgbouncer`).
bench-queue: $(STAMP)
	@case "$(BENCH_ARGS)" in *--via-pgbouncer*) $(MAKE) --no-print-directory pgbouncer;; esac
	$(UV) -e '.[dev,bench]' || $(PIP) -e '.[dev,bench]'
	$(BIN)/python -m bench.queue_side_by_side $(BENCH_ARGS)

## WAL records, full-page images, bytes and the database's CPU per no-op job, stage by stage and
## relation by relation, jobstream beside PgQueuer (bench/queue_wal.py; about two minutes;
## BENCH_ARGS=--explain adds the claim's and the success's EXPLAIN (ANALYZE, BUFFERS, WAL),
## --side jobstream leaves PgQueuer out). Installs the `bench` extra into the venv first. Needs
## PostgreSQL 18 (the embedded one).
bench-wal: $(STAMP)
	$(UV) -e '.[dev,bench]' || $(PIP) -e '.[dev,bench]'
	$(BIN)/python -m bench.queue_wal $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .cache
