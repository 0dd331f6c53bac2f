# syntax=docker/dockerfile:1
# mirrorflow: one binary (controller, worker, tools). librdkafka is built from source by
# rdkafka's cmake-build feature and linked statically, as are zstd, curl (librdkafka's
# OIDC token fetch for SASL/OAUTHBEARER, built for HTTP(S) only) and jemalloc, the process's
# malloc (tikv-jemalloc-sys builds it with make); the binary still links
# libssl3/libcrypto3 and zlib dynamically (see `ldd`), which the runtime image provides.
#
#   docker build -t mirrorflow:0.1.0 .
#
# The tag must match what the controller gives worker pods: the chart passes its own image as
# MIRRORFLOW_IMAGE, and the binary's default is mirrorflow:<crate version>.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
# cmake builds librdkafka; the -dev packages are what scripts/setup.sh installs for the same build.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake pkg-config libssl-dev libsasl2-dev zlib1g-dev libzstd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Caches survive between builds; the binary is copied out of the cached target dir. The
# default features are the operator's: the demo and its local-broker harness (`testkit`) stay out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mirrorflow \
 && install -D -m 0755 target/release/mirrorflow /out/mirrorflow \
 && ldd /out/mirrorflow

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# Only the shared libraries the binary links (plus CA certificates for TLS to brokers).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot
COPY --from=build /out/mirrorflow /usr/local/bin/mirrorflow
# Smoke test: fails the build when a shared library is missing from this image.
RUN mirrorflow --version
# Numeric, so the kubelet can check runAsNonRoot; the chart and the worker pods run as 65532.
USER 65532:65532
ENTRYPOINT ["mirrorflow"]
CMD ["--help"]

LABEL org.opencontainers.image.title="mirrorflow" \
      org.opencontainers.image.description="Kafka cross-cluster replication operator" \
      org.opencontainers.image.licenses="Apache-2.0"
