# dts: distributed job scheduler. `make` or `make help` lists the targets.
#
# Everything runs from the workspace root. Go patterns use `work` (every
# package of every module in go.work): `./...` fails at a workspace root.
# Local state (binaries, data, logs, pids) lives in .run/, which git ignores.

SHELL        := bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO       ?= go
RUN_DIR  := .run
BIN_DIR  := $(RUN_DIR)/bin
CLUSTER  := deploy/local/cluster.sh
MODULE   := github.com/dtsched/dts
BINARIES := $(MODULE)/submitter/cmd/submitter \
            $(MODULE)/coordinator/cmd/coordinator \
            $(MODULE)/worker/cmd/worker

# Whole suite under the race detector; must finish well inside 15 min on 2 cores.
TEST_TIMEOUT ?= 14m
# Extra flags, e.g. make test TESTFLAGS='-run TestClaim -v'
# Test binaries are linked without DWARF (-w): every run links each of
# them anew, DWARF was about a seventh of that, and nobody debugs them;
# stack traces and race reports do not need it.
TEST_LDFLAGS := -ldflags=-w
TESTFLAGS    ?=
# The Helm chart's tests (deploy/helm) run without -race: they only render
# templates in one goroutine, and Helm and Kubernetes take minutes of CPU to
# build with -race.
HELM_TESTS   := $(MODULE)/deploy/helm
# The system tests: built binaries in clusters, faults between hosts. Only
# `make test` runs them; `make test-short` is the quick unit layer.
SYSTEM_TESTS := $(MODULE)/e2e
# How much `make test` (and `make fuzz`) fuzzes each target beyond its seed
# corpus, which plain `go test` runs too. A count of executions, not a
# duration: with a duration the fuzzer can end with a spurious "context
# deadline exceeded" failure when time runs out mid-input.
FUZZTIME     ?= 30000x
# The linter of `make lint`, pinned. `go run` fetches it once; the module
# cache is tried as a proxy before GOPROXY, so later runs work offline.
STATICCHECK  ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
LINT_GOPROXY  = file://$(shell $(GO) env GOMODCACHE)/cache/download,$(shell $(GO) env GOPROXY)
# Which log `make logs` shows (empty: all), e.g. make logs NAME=worker-1
NAME         ?=
# The conformance worker `make conformance` checks, e.g.
# make conformance CMD='python3 /abs/my_worker.py' CMD_ENV='PYTHONPATH=/abs/src'
CMD          ?=
CMD_ENV      ?=

.PHONY: help build up down status logs prereqs test test-short chaos conformance screenshots fuzz fmt vet lint bench clean

help: ## Show this help
	@awk 'BEGIN { FS = ":.*## " } \
		/^[a-zA-Z_-]+:.*## / { printf "  \033[36m%-11s\033[0m %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo "  Ports and URLs of 'make up' are set with PG_PORT, REDIS_PORT, SUBMITTER_PORT,"
	@echo "  COORDINATOR_PORT, WORKER_BASE_PORT, PROMETHEUS_PORT, GRAFANA_PORT, or"
	@echo "  DATABASE_URL + REDIS_URL to use servers you already run (see $(CLUSTER))."

build: ## Build submitter, coordinator and worker into .run/bin
	@mkdir -p $(BIN_DIR)
	$(GO) build -o $(BIN_DIR)/ $(BINARIES)

up: ## Start PostgreSQL, Redis, the services, Prometheus (and Grafana if installed) locally
	@bash $(CLUSTER) up

down: ## Stop everything 'make up' started (workers drain for up to 35 s)
	@bash $(CLUSTER) down

status: ## Show each local component: running or not, pid, URL, health
	@bash $(CLUSTER) status

logs: ## Show the local logs (follows on a terminal); one only with NAME=worker-1
	@bash $(CLUSTER) logs $(NAME)

test: prereqs vet ## Install what the tests start if missing, vet, run every test with -race (the Helm chart's without), then each fuzz target briefly
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_LDFLAGS) $(TESTFLAGS) $$($(GO) list -e work | grep -vx '$(HELM_TESTS)')
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_LDFLAGS) $(TESTFLAGS) $(HELM_TESTS)
	@$(MAKE) --no-print-directory fuzz

prereqs: ## Install the Debian packages the tests start (PostgreSQL, Redis, Prometheus, gcc) when missing
	@bash deploy/local/prereqs.sh test

fuzz: ## Run every fuzz target of the workspace for FUZZTIME (default 30000x executions); a crasher is saved in its testdata/fuzz
	@set -e; for f in $$(grep -rlE --include='*_test.go' '^func Fuzz[A-Z]' $$($(GO) list -m -f '{{.Dir}}')); do \
		dir=$$(dirname "$$f"); pkg=./$${dir#$(CURDIR)/}; \
		for name in $$(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$$f" | sed 's/^func //'); do \
			echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
			$(GO) test $(TEST_LDFLAGS) -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
		done; \
	done

screenshots: ## Retake the console's screenshots (docs/ui/*.png) with the browser test
	UPDATE_SCREENSHOTS=1 $(GO) test -count=1 -run '^TestBrowser(Ops)?$$' ./submitter/ui

chaos: prereqs ## Faults between hosts (a network namespace per component), long: 20 s each under 100 jobs/s; prints the table
	DTS_CHAOS_LONG=1 $(GO) test -race -count=1 -timeout 40m -run '^TestChaosHosts$$' -v ./e2e/

conformance: prereqs ## Run the worker-protocol conformance suite against CMD (docs/conformance.md)
	@if [[ -z "$(CMD)" ]]; then echo "usage: make conformance CMD='python3 my_worker.py' [CMD_ENV='NAME=VALUE ...']" >&2; exit 2; fi
	DTS_CONFORMANCE_CMD='$(CMD)' DTS_CONFORMANCE_ENV='$(CMD_ENV)' \
		$(GO) test -race -count=1 -timeout 5m -run '^TestConformanceGo$$' -v ./e2e/

test-short: ## The quick unit layer: every package but the system tests (e2e), in -short mode, without -race
	$(GO) test -short -count=1 -timeout 5m $(TEST_LDFLAGS) $(TESTFLAGS) $$($(GO) list -e work | grep -vx '$(SYSTEM_TESTS)')

fmt: ## Format every Go file of the workspace (gofmt -s)
	gofmt -s -w $$($(GO) list -m -f '{{.Dir}}')

vet: ## go vet every package of the workspace
	$(GO) vet work

lint: vet ## Check gofmt -s, go vet and staticcheck (staticcheck.conf) over the workspace; CI runs it after make test
	@out=$$(gofmt -s -l $$($(GO) list -m -f '{{.Dir}}')); \
	if [[ -n "$$out" ]]; then printf 'not formatted (make fmt fixes them):\n%s\n' "$$out" >&2; exit 1; fi
	GOPROXY='$(LINT_GOPROXY)' $(GO) run $(STATICCHECK) work

bench: ## Load-test a fresh cluster (drain, sustained, latency, recovery); BENCHFLAGS='-quick -json FILE'
	@if [[ -z "$${DATABASE_URL:-}" || -z "$${REDIS_URL:-}" ]]; then \
		bash $(CLUSTER) up >&2; \
		source $(RUN_DIR)/cluster.env; \
		export DATABASE_URL REDIS_URL; \
	fi; \
	$(GO) run ./bench/cmd/bench $(BENCHFLAGS)

clean: ## Stop the local cluster (make down) and delete .run: data, logs, binaries
	@bash $(CLUSTER) clean
