# syntax=docker/dockerfile:1
# The hiregate gateway: a release build of the `hiregate` binary on a slim Debian, run as a
# non-root user. Build from the repository root:
#   docker build -t hiregate .
# and see deploy/compose.yaml for PostgreSQL and two instances.

FROM rust:1-bookworm AS builder
# aws-lc-sys (the TLS crypto of reqwest/rustls) compiles C; cmake and clang cover its build
# paths on every architecture.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The cache mounts keep the registry and incremental state between builds; the binary is
# copied out of the cached target dir so the next stage can take it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p hiregate-gateway --no-default-features \
 && install -m 0755 target/release/hiregate /usr/local/bin/hiregate

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 hiregate \
 && useradd --system --uid 10001 --gid hiregate --home-dir /var/lib/hiregate --shell /usr/sbin/nologin hiregate \
 && install -d -o hiregate -g hiregate -m 0750 /var/lib/hiregate /var/lib/hiregate/keys
COPY --from=builder /usr/local/bin/hiregate /usr/local/bin/hiregate
USER hiregate:hiregate
WORKDIR /var/lib/hiregate
ENV HIREGATE_HTTP__LISTEN_ADDRESS=0.0.0.0:8080 \
    HIREGATE_LOG__FORMAT=json
EXPOSE 8080
# No curl in the image: the binary checks its own /healthz.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["hiregate", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["hiregate"]
CMD ["serve"]
