# Thin wrapper over scripts/bootstrap.sh, CMake presets and ctest. See README.md.
JOBS ?= $(shell nproc)

.PHONY: run test build lint debug asan tsan bootstrap clean package image

bootstrap:
	scripts/bootstrap.sh

build: bootstrap
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

# SLUICE_SERVE_ARGS: extra flags for `sluice serve` (e.g. other ports; scripts/fresh_test.sh).
run: build
	build/release/sluice serve $(SLUICE_SERVE_ARGS)

# Static checks (scripts/lint.sh): clang-format clean, one locking style, and clang-tidy with
# clang-14's -Wthread-safety -Werror over src/ (the lint preset; nothing is compiled to code).
lint: bootstrap
	JOBS=$(JOBS) scripts/lint.sh

# Every check, in phases (bootstrap, lint, build, ctest, fuzz, sanitized unit tests), with a
# summary of each phase's time at the end (scripts/test.sh).
test:
	JOBS=$(JOBS) scripts/test.sh

# build/release/sluice_<version>_amd64.deb: binary, library and headers, /etc/sluice, systemd unit.
package: build
	cd build/release && cpack -G DEB

# localhost/sluice:<version> and localhost/sluice:latest, the OCI image of the release build
# (deploy/image/build.sh, docs/image.md); IMAGE_ARCHIVE=FILE also saves it as an OCI archive.
image: build
	deploy/image/build.sh $(if $(IMAGE_ARCHIVE),--archive $(IMAGE_ARCHIVE))

debug: bootstrap
	cmake --preset debug
	cmake --build --preset debug -j $(JOBS)

asan: bootstrap
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

tsan: bootstrap
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

clean:
	rm -rf build
