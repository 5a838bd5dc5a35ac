# rkllmd's container image (docs/deploy.md, "A container image").
#
#   docker buildx build --platform linux/arm64,linux/amd64 -t REGISTRY/rkllmd:0.1.0 --push .
#
# linux/arm64 is for the boards: Rockchip's librkllmrt.so and the models are
# mounted from the host (the image carries neither), the NPU's device nodes
# passed through. linux/amd64 is for trying it: with no runtime library
# mounted, rkllmd serves the simulated runtime built into the binary
# (backend "auto"; a real .rkllm model is never served by the simulator).
#
#   docker run --rm -p 8080:8080 REGISTRY/rkllmd:0.1.0                       # amd64: the simulator
#   docker run --rm -p 8080:8080 \
#     --device /dev/dri/renderD129 --group-add "$(getent group render | cut -d: -f3)" \
#     -v /usr/lib/librkllmrt.so:/usr/lib/librkllmrt.so:ro \
#     -v /var/lib/rkllmd/models:/var/lib/rkllmd/models:ro \
#     REGISTRY/rkllmd:0.1.0 --model /var/lib/rkllmd/models/qwen2.5-1.5b/Qwen2.5-1.5B-Instruct_w8a8.rkllm
#
# On kernels with /dev/rknpu instead of a render node: --device /dev/rknpu
# --device /dev/dma_heap (and the group owning them).

# The build runs on the build machine's own architecture and cross-compiles
# for the target's (as .ci/run does with Debian's cross gcc): no emulation.
FROM --platform=$BUILDPLATFORM docker.io/library/rust:1-bookworm AS build
ARG TARGETARCH
RUN set -eu; \
    case "$TARGETARCH" in \
      arm64) apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
             && rm -rf /var/lib/apt/lists/* && rustup target add aarch64-unknown-linux-gnu ;; \
      amd64) ;; \
      *) echo "unsupported architecture: $TARGETARCH" >&2; exit 1 ;; \
    esac
WORKDIR /src
COPY . .
RUN set -eu; \
    case "$TARGETARCH" in \
      arm64) target=aarch64-unknown-linux-gnu; export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc ;; \
      amd64) target=x86_64-unknown-linux-gnu ;; \
    esac; \
    cargo build --release --locked --target "$target" -p rkllmd; \
    install -D -m 0755 "target/$target/release/rkllmd" /out/usr/bin/rkllmd; \
    install -D -m 0644 -t /out/usr/share/rkllmd/swagger-ui assets/swagger-ui/*.gz assets/swagger-ui/LICENSE \
        assets/swagger-ui/NOTICE assets/swagger-ui/swagger-ui-bundle.js.LICENSE.txt

FROM docker.io/library/debian:bookworm-slim
# CA certificates: `rkllmd pull` and /api/pull verify the Hub's TLS
# certificate against the system's store.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The service user of the .deb (systemd/sysusers.conf), with a fixed id so
# that volumes and the NPU's group can be granted to it.
RUN groupadd --system --gid 999 rkllmd \
    && useradd --system --uid 999 --gid rkllmd --home-dir /var/lib/rkllmd --shell /usr/sbin/nologin rkllmd \
    && install -d -o rkllmd -g rkllmd -m 0750 /var/lib/rkllmd \
    && install -d -m 0755 /var/lib/rkllmd/models /etc/rkllmd
COPY --from=build /out/ /
USER 999:999
WORKDIR /var/lib/rkllmd
# Listen on every interface inside the container; the port is published by
# the runtime (docker -p, a Kubernetes Service).
ENV RKLLMD_HOST=0.0.0.0 \
    RKLLMD_PORT=8080
EXPOSE 8080
# Ready = the model is loaded and a queue place is free (docs/deploy.md,
# "Watching it"). bash's /dev/tcp: the slim image has no HTTP client, and
# adding one for this would double the image.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${RKLLMD_PORT:-8080} && printf 'GET /health/ready HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/bin/rkllmd"]
