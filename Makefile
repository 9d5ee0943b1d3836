# pvrescue — keeps pods running when the volumes under them break.
# `make help` lists the targets. Tools and test binaries are pinned into ./bin.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

KUBE_VERSION      ?= v1.37.2
VERSITYGW_VERSION ?= v1.8.0
GOLANGCI_LINT_VERSION ?= v2.15.0
# The Helm CLIs the README install e2e runs (TestInstallHelm3, TestHelm): the last approved of each
# major, built from the Go module proxy (make helm-clis). The e2e reads these two lines.
HELM3_VERSION     ?= v3.21.4
HELM4_VERSION     ?= v4.3.2
BIN               := $(CURDIR)/bin
KUBE_BIN          := $(BIN)/k8s/$(KUBE_VERSION)
# Built binaries are also kept outside the checkout, keyed by version, so a fresh clone on the
# same machine reuses them instead of rebuilding Kubernetes.
CACHE_DIR         ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pvrescue
KUBE_CACHE        := $(CACHE_DIR)/kube/$(KUBE_VERSION)
GO                ?= go
GOTEST_FLAGS      ?= -count=1
IMG_WEBHOOK       ?= pvrescue-webhook:dev
IMG_AGENT         ?= pvrescue-agent:dev
# The tag of `make images` / `make push` (the chart's appVersion names the release's tag).
VERSION           ?= $(shell git describe --tags --always --dirty)
PLATFORMS         ?= linux/amd64,linux/arm64
# make push: REGISTRY=host[:port]/path; INSECURE=1 for plain http to a non-local registry.
REGISTRY          ?=
INSECURE          ?=
# Optional multi-platform base for the agent image (with s3fs, fuse3, util-linux); empty: the agent
# carries Debian's s3fs, fuse3 and their libraries, pinned by IMAGE_LOCK (make image-lock).
AGENT_BASE        ?=
IMAGE_LOCK        ?= hack/images/debian.lock

export KUBEBUILDER_ASSETS := $(KUBE_BIN)
# Every Go build here is static, like the binaries the images and the e2e suite build: one variant
# of client-go, controller-runtime, … in the build cache instead of a cgo one for the tests and a
# static one for the images (minutes on a cold 2-core machine). The -race runs need cgo.
export CGO_ENABLED ?= 0

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build the webhook, agent and (static) helper binaries into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-webhook ./cmd/pvrescue-webhook
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-agent ./cmd/pvrescue-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/pvrescue-sidecar ./cmd/pvrescue-sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kubectl-pvrescue ./cmd/kubectl-pvrescue

.PHONY: generate
generate: ## Regenerate generated files (docs/config-reference.md from internal/config); a unit test fails while they are stale.
	$(GO) generate ./internal/config/

.PHONY: docker-build
docker-build: ## Build the container images with docker or podman (needs a running engine).
	@b=$$(command -v docker || command -v podman || true); \
	if [ -z "$$b" ]; then echo "no docker or podman client found" >&2; exit 1; fi; \
	$$b build -f Dockerfile.webhook -t $(IMG_WEBHOOK) . && $$b build -f Dockerfile.agent -t $(IMG_AGENT) .

.PHONY: images
images: images-deps ## Build the webhook, agent and helper images (linux/amd64+arm64) without an engine: OCI layouts in bin/images/, tagged `git describe`; the agent's Debian packages as hack/images/debian.lock pins them.
	$(GO) run ./hack/images build -out $(BIN)/images -version $(VERSION) -platforms $(PLATFORMS) -lock $(IMAGE_LOCK) -deb-cache $(CACHE_DIR)/debs $(if $(AGENT_BASE),-agent-base $(AGENT_BASE)) $(if $(INSECURE),-insecure)

.PHONY: image-lock
image-lock: images-deps ## Re-resolve the agent image's Debian packages by name (s3fs, fuse3, … and their libraries, amd64+arm64) into hack/images/debian.lock.
	$(GO) run ./hack/images lock -lock $(IMAGE_LOCK)

.PHONY: push
push: ## Push the images of `make images` to REGISTRY=host[:port]/path as <image>:VERSION, and the chart as oci://REGISTRY/pvrescue --version $(make -s chart-version) (INSECURE=1: plain http).
	@[ -n "$(REGISTRY)" ] || { echo "make push needs REGISTRY=host[:port]/path" >&2; exit 1; }
	$(GO) run ./hack/images push -in $(BIN)/images -version $(VERSION) -registry $(REGISTRY) -chart charts/pvrescue $(if $(INSECURE),-insecure)

.PHONY: chart-version
chart-version: ## Print the version `make push` gives the chart: VERSION when it is SemVer (a release tag), else 0.0.0-g<VERSION>.
	@v='$(VERSION)'; if [[ $$v =~ ^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$$ ]]; then echo "$$v"; else echo "0.0.0-g$$v"; fi

# The kubectl plugin's directory: on PATH in a fresh shell (Debian's default PATH has /usr/local/bin).
PLUGIN_DIR        ?= /usr/local/bin

.PHONY: kubectl-plugin
kubectl-plugin: ## Install the kubectl plugin (`kubectl pvrescue`) into PLUGIN_DIR (default /usr/local/bin, on PATH in a fresh shell).
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kubectl-pvrescue ./cmd/kubectl-pvrescue
	install -D -m 0755 $(BIN)/kubectl-pvrescue $(PLUGIN_DIR)/kubectl-pvrescue

##@ Test

.PHONY: test
test: ## Run every test layer (lint, unit, integration, node, e2e), independent ones side by side (hack/test.sh).
	MAKE="$(MAKE)" hack/test.sh

.PHONY: unit
unit: monitoring-deps ## Fast unit tests: pure functions and fakes, no root, no cluster (promtool checks the alert rules).
	$(GO) test $(GOTEST_FLAGS) ./...
	# Admissions are answered from pooled buffers: concurrent answers checked under the race detector.
	CGO_ENABLED=1 $(GO) test $(GOTEST_FLAGS) -race -run 'TestServeHTTP' ./webhook/
	# The exit watcher's event loop and its walks run concurrently, on real processes.
	CGO_ENABLED=1 $(GO) test $(GOTEST_FLAGS) -race ./nodeagent/fusewatch/

.PHONY: image-check
image-check: images-deps ## The images as built: two builds of one commit give one digest each; every arm64 binary (and the agent's s3fs from the image's own root) runs under qemu-user-static, the amd64 ones in a chroot (root).
	@[ "$$(id -u)" = 0 ] || { echo "make image-check needs root (chroot into the unpacked amd64 images)" >&2; exit 1; }
	$(GO) test $(GOTEST_FLAGS) -tags imagecheck -timeout 30m -run '^TestImages' ./hack/images/ -deb-cache $(CACHE_DIR)/debs

# The packages (of this module) that hold test files of a build tag: the integration and node
# layers run these, each package's whole suite with the tag. The other packages' test binaries are
# the same as the unit layer's, which has run them (the node layer ran them again one by one, -p 1).
tagged_packages = $(shell { git grep -l -E '^//go:build.*[^!]\b$(1)\b' -- '*.go' ':!e2e' 2>/dev/null || \
  grep -rlE --include='*.go' --exclude-dir=e2e --exclude-dir=bin '^//go:build.*[^!]\b$(1)\b' .; } | xargs -r -n1 dirname | sed 's|^\./||' | sort -u | sed 's|^|./|')

.PHONY: integration
integration: kube-binaries ## Tests against a real kube-apiserver + etcd.
	$(GO) test $(GOTEST_FLAGS) -tags integration $(call tagged_packages,integration)
	@if ls e2e/deploy/*_test.go e2e/certmanager/*_test.go >/dev/null 2>&1; then \
	  cd e2e && $(GO) test $(GOTEST_FLAGS) -tags integration $$(ls -d ./deploy ./certmanager 2>/dev/null); fi

.PHONY: node
node: kube-binaries node-deps versitygw ## Privileged tests: real loop devices, mounts, s3fs + S3 server (root).
	@[ "$$(id -u)" = 0 ] || { echo "make node needs root (loop devices, mounts)" >&2; exit 1; }
	$(GO) test $(GOTEST_FLAGS) -p 1 -tags node $(call tagged_packages,node)

.PHONY: e2e
e2e: kube-binaries-all kubectl helm-clis e2e-deps versitygw ## End-to-end suite on a real kubelet + containerd node (root).
	@[ "$$(id -u)" = 0 ] || { echo "make e2e needs root" >&2; exit 1; }
	# TestDemo is make demo's narrated subset of TestPVRescue's scenarios: not run twice here.
	# -v: each scenario's time ("--- PASS: TestPVRescue/… (s)") and RESULT lines in the log.
	# -timeout is per package: the scenarios package takes ~21 min here and ~32 on CI's slower
	# runs (2269 s for all of make test); 55 min leaves it room and make test under CI's 90.
	cd e2e && $(GO) test $(GOTEST_FLAGS) -v -p 1 -tags e2e -timeout 55m -skip '^TestDemo$$' ./...

# The compiles the e2e suite does on its way (the images' static binaries with -trimpath, as
# hack/images builds them; the test CSI plugin), done ahead so that make test's e2e suite starts
# on a warm build cache. Compiles only: several packages at once are not linked.
.PHONY: e2e-prebuild
e2e-prebuild:
	CGO_ENABLED=0 $(GO) build -trimpath ./cmd/...
	cd e2e && CGO_ENABLED=0 $(GO) build -o /dev/null ./csi-s3-test

# The demo cluster's admin kubeconfig (e2e/cluster writes it into the run's work dir).
DEMO_KUBECONFIG   ?= $(CURDIR)/e2e/.work/suite/admin.kubeconfig

.PHONY: demo
demo: kube-binaries-all e2e-deps versitygw ## The two rescues, narrated, on a real node (TestDemo, ~1.5 min once built); leaves the cluster up (root).
	@[ "$$(id -u)" = 0 ] || { echo "make demo needs root" >&2; exit 1; }
	cd e2e && PVRESCUE_DEMO=1 $(GO) test -count=1 -tags e2e -timeout 20m -v -run '^TestDemo$$' ./scenarios/
	@$(MAKE) -s demo-status

.PHONY: demo-status
demo-status: ## Print `kubectl pvrescue status -o wide` for the demo cluster (the plugin built into bin/).
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kubectl-pvrescue ./cmd/kubectl-pvrescue
	@printf '\n=== What an operator sees (bin/kubectl-pvrescue, KUBECONFIG=%s)\n\n$$ kubectl pvrescue status -o wide\n' $(DEMO_KUBECONFIG)
	@$(BIN)/kubectl-pvrescue --kubeconfig $(DEMO_KUBECONFIG) status -o wide

.PHONY: demo-down
demo-down: ## Remove every process, mount, loop device and file make demo (or a crashed e2e run) left.
	cd e2e && $(GO) run ./cmd/pvrescue-e2e down --work-dir $(CURDIR)/e2e/.work/suite
	cd e2e && $(GO) run ./cmd/pvrescue-e2e down --work-dir $(CURDIR)/e2e/.work/cluster
	cd e2e && $(GO) run ./cmd/pvrescue-e2e down --work-dir $(CURDIR)/e2e/.work/helm
	cd e2e && $(GO) run ./cmd/pvrescue-e2e down --work-dir $(CURDIR)/e2e/.work/install
	@rmdir $(CURDIR)/e2e/.work 2>/dev/null || true

.PHONY: fuzz
fuzz: ## Run the admission handler fuzzer for 60s.
	$(GO) test -run '^$$' -fuzz FuzzAdmission -fuzztime 60s ./webhook/

.PHONY: bench
bench: kube-binaries-all e2e-deps versitygw ## Measure against floors/baselines in one run (root, ~30 min); writes BENCHMARKS.md, raw output in bench/.
	@[ "$$(id -u)" = 0 ] || { echo "make bench needs root (loop devices, mounts, s3fs)" >&2; exit 1; }
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/pvrescue-sidecar ./cmd/pvrescue-sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-agent ./cmd/pvrescue-agent
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-agent-prof ./hack/bench/agentprof
	$(GO) build -o $(BIN)/bench ./hack/bench
	$(BIN)/bench -root $(CURDIR) -out BENCHMARKS.md -raw bench

.PHONY: bench-stress
bench-stress: kube-binaries node-deps versitygw ## On demand: 500 rounds of lost-mount incidents (restarted, kept down, rolled, restarted twice; 1 and 5 pods) on the host rig beside busy loops; writes bench/stress.md, which make bench embeds (root, ~40 min).
	@[ "$$(id -u)" = 0 ] || { echo "make bench-stress needs root (mounts, s3fs)" >&2; exit 1; }
	$(GO) build -o $(BIN)/bench ./hack/bench
	$(BIN)/bench -root $(CURDIR) -only stress -out bench/stress.md -raw bench $(STRESS_FLAGS)

.PHONY: bench-ablation
bench-ablation: kube-binaries-all e2e-deps versitygw ## On demand: the window a pod sees at 20 and 100 pods on the e2e cluster with each window mechanism switched off in turn beside the shipped agent (issue 52); writes bench/ablation.md and the appendix of BENCHMARKS.md (root; 3 rounds ≈ 30 min).
	@[ "$$(id -u)" = 0 ] || { echo "make bench-ablation needs root (a kubelet, mounts, s3fs)" >&2; exit 1; }
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/pvrescue-sidecar ./cmd/pvrescue-sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-agent ./cmd/pvrescue-agent
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pvrescue-agent-prof ./hack/bench/agentprof
	$(GO) build -o $(BIN)/bench ./hack/bench
	$(BIN)/bench -root $(CURDIR) -only ablation -out bench/ablation.md -raw bench $(ABLATION_FLAGS)
	$(BIN)/bench -root $(CURDIR) -raw bench -refresh-appendix BENCHMARKS.md

.PHONY: lint
lint: vet lint-golangci ## gofmt, go vet and golangci-lint (.golangci.yml) on every build tag, e2e/ included.

# lint's first half (make test runs the unit tests once it is done: its compiles are theirs too).
.PHONY: vet
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	# The root and e2e modules must build shared dependencies at one version (else cold builds compile them twice).
	$(GO) run ./hack/modsync
	# One vet per module over every build tag: no file is built only without a tag (no `!integration`,
	# `!node`, `!e2e` constraint), so the tagged build is a superset of the untagged one.
	$(GO) vet -tags integration,node,imagecheck ./...
	cd e2e && $(GO) vet -tags e2e,integration ./...

.PHONY: lint-golangci
lint-golangci: golangci-lint
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...
	cd e2e && $(GOLANGCI_LINT) run --allow-parallel-runners --build-tags e2e,integration ./...

##@ Tools

# Every Kubernetes binary the test layers use, built by one run of the script when any is missing
# (one module resolution, links beside compiles); the per-binary rules below then only copy them.
KUBE_TEST_BINARIES := kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
.PHONY: kube-binaries-together
kube-binaries-together:
	KUBE_VERSION=$(KUBE_VERSION) hack/build-kube-binaries.sh $(KUBE_CACHE) $(KUBE_TEST_BINARIES)

.PHONY: kube-binaries
kube-binaries: $(KUBE_BIN)/kube-apiserver $(KUBE_BIN)/etcd ## Build kube-apiserver from the Go module proxy and link etcd into bin/.

.PHONY: kube-binaries-all
kube-binaries-all: kube-binaries-together kube-binaries $(KUBE_BIN)/kube-controller-manager $(KUBE_BIN)/kube-scheduler $(KUBE_BIN)/kubelet ## Also build controller-manager, scheduler, kubelet (with kubectl, in one build).

# kubectl: the README's install commands run verbatim in the e2e (TestInstallHelm3, TestHelm), and
# kubectl may be absent from the machine.
.PHONY: kubectl
kubectl: $(KUBE_BIN)/kubectl ## Build kubectl (same version) from the Go module proxy into bin/.

$(KUBE_BIN)/kube-apiserver $(KUBE_BIN)/kube-controller-manager $(KUBE_BIN)/kube-scheduler $(KUBE_BIN)/kubelet $(KUBE_BIN)/kubectl:
	KUBE_VERSION=$(KUBE_VERSION) hack/build-kube-binaries.sh $(KUBE_CACHE) $(@F)
	mkdir -p $(KUBE_BIN)
	cp $(KUBE_CACHE)/$(@F) $@.tmp && mv $@.tmp $@

$(KUBE_BIN)/etcd:
	@command -v etcd >/dev/null || hack/install-deps.sh node
	mkdir -p $(KUBE_BIN)
	ln -sf $$(command -v etcd) $@

# golangci-lint is named by version in bin/, so a new pin installs afresh; the build is also
# cached outside the checkout like the other tools.
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install the pinned golangci-lint into bin/.
$(GOLANGCI_LINT):
	@mkdir -p $(BIN)
	@if [ -x $(CACHE_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION) ]; then \
	  cp $(CACHE_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION) $@; \
	else \
	  GOBIN=$(BIN)/.golangci-lint-build GOFLAGS= $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	  mv $(BIN)/.golangci-lint-build/golangci-lint $@ && rmdir $(BIN)/.golangci-lint-build; \
	  mkdir -p $(CACHE_DIR) && cp $@ $(CACHE_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION); \
	fi

# Each Helm CLI in bin/helm/<version>/helm, cached outside the checkout like the kube binaries. The
# version ldflag is what Helm's release builds set (without it `helm version` names no patch release).
# Helm 4 is built from the e2e module (a `tool` there, the same release as its Helm SDK): it shares
# nearly all of its ~1200 packages (client-go, kubectl, …) with the e2e test build, so a cold run
# compiles them once. Helm 3 needs Kubernetes 0.36 libraries, so it is built from its own module.
HELM_CACHE := $(CACHE_DIR)/helm
HELM3      := $(BIN)/helm/$(HELM3_VERSION)/helm
HELM4      := $(BIN)/helm/$(HELM4_VERSION)/helm

.PHONY: helm-clis
helm-clis: $(HELM3) $(HELM4) ## Build the Helm 3 and Helm 4 CLIs (HELM3_VERSION, HELM4_VERSION) from the Go module proxy into bin/helm/<version>/.
$(HELM3):
	@if [ ! -x $(HELM_CACHE)/$(HELM3_VERSION)/helm ]; then \
	  build=$(HELM_CACHE)/.build-$(HELM3_VERSION); \
	  echo ">> building helm $(HELM3_VERSION) from helm.sh/helm/v3 (cold: a few minutes on 2 cores)" >&2; \
	  GOBIN=$$build GOFLAGS= CGO_ENABLED=0 $(GO) install -trimpath \
	    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(HELM3_VERSION)" helm.sh/helm/v3/cmd/helm@$(HELM3_VERSION); \
	  mkdir -p $(HELM_CACHE)/$(HELM3_VERSION) && mv $$build/helm $(HELM_CACHE)/$(HELM3_VERSION)/helm && rmdir $$build; \
	fi
	mkdir -p $(@D)
	cp $(HELM_CACHE)/$(HELM3_VERSION)/helm $@.tmp && mv $@.tmp $@
$(HELM4):
	@if [ ! -x $(HELM_CACHE)/$(HELM4_VERSION)/helm ]; then \
	  have=$$(cd e2e && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v4); \
	  [ "$$have" = "$(HELM4_VERSION)" ] || { echo "HELM4_VERSION is $(HELM4_VERSION) but e2e/go.mod has helm.sh/helm/v4 $$have: run 'go get -tool helm.sh/helm/v4/cmd/helm@$(HELM4_VERSION)' in e2e/" >&2; exit 1; }; \
	  echo ">> building helm $(HELM4_VERSION) from the e2e module's helm.sh/helm/v4" >&2; \
	  mkdir -p $(HELM_CACHE)/$(HELM4_VERSION); \
	  (cd e2e && GOFLAGS= $(GO) build -o $(HELM_CACHE)/$(HELM4_VERSION)/helm.tmp \
	    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM4_VERSION)" helm.sh/helm/v4/cmd/helm); \
	  mv $(HELM_CACHE)/$(HELM4_VERSION)/helm.tmp $(HELM_CACHE)/$(HELM4_VERSION)/helm; \
	fi
	mkdir -p $(@D)
	cp $(HELM_CACHE)/$(HELM4_VERSION)/helm $@.tmp && mv $@.tmp $@

.PHONY: versitygw
versitygw: $(BIN)/versitygw ## Build the versitygw S3 server used by the tests.
$(BIN)/versitygw:
	@mkdir -p $(BIN)
	@if [ -x $(CACHE_DIR)/versitygw-$(VERSITYGW_VERSION) ]; then \
	  cp $(CACHE_DIR)/versitygw-$(VERSITYGW_VERSION) $@; \
	else \
	  GOBIN=$(BIN) GOFLAGS= $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	  mkdir -p $(CACHE_DIR) && cp $@ $(CACHE_DIR)/versitygw-$(VERSITYGW_VERSION); \
	fi

# Every host prerequisite is owned here: apt packages and kernel modules (hack/install-deps.sh),
# the Kubernetes binaries and versitygw (built above, cached by version), loop devices (each test
# makes and removes its own; fresh-devices resets them). No sysctl needs changing.
.PHONY: deps
deps: ## Install every host prerequisite of the tests (apt packages, kernel modules), when missing.
	hack/install-deps.sh node e2e monitoring images

.PHONY: node-deps
node-deps: ## Install host packages and kernel modules the node tests need, when missing.
	hack/install-deps.sh node

.PHONY: e2e-deps
e2e-deps: ## Install host packages and kernel modules the e2e suite needs (Prometheus included), when missing.
	hack/install-deps.sh node e2e monitoring images

.PHONY: images-deps
images-deps: ## Add the images' architectures to apt (arm64) and install qemu-user-static, when missing.
	hack/install-deps.sh images

.PHONY: monitoring-deps
monitoring-deps: ## Install promtool (Debian prometheus) for the alert-rule tests, when missing.
	hack/install-deps.sh monitoring

.PHONY: fresh-devices
fresh-devices: ## Remove unattached loop devices above loop7, as on a fresh machine (root; CI runs it first).
	@[ "$$(id -u)" = 0 ] || { echo "make fresh-devices needs root" >&2; exit 1; }
	$(GO) run ./hack/freshdevices

.PHONY: clean
clean: ## Remove built binaries (keeps the version cache in $(CACHE_DIR)).
	rm -rf $(BIN)
