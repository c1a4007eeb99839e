# tpoold container image: docs/operations.md, "Container".
#
#   docker build -t tpoold:0.1.0 .        (or podman build --format docker)
#   docker run --rm -p 50051:50051 -p 9464:9464 tpoold:0.1.0
#
# The build stage runs the same steps as CI and `make package`:
# scripts/install-deps.sh (group build) and the CMake release preset, which
# makes the Debian package. deploy/container/runtime-rootfs.sh unpacks that
# package and adds only the shared libraries its programs and plugins load
# (the closure dpkg-shlibdeps turns into the package's Depends), CA
# certificates and the daemon's user; the runtime stage is that root alone,
# FROM scratch: no shell, no package manager, no compiler (about 30 MB).
# ctest deploy.docker.build_steps checks this file and runs its build-stage
# commands; ctest -L container (scripts/container-test.sh) builds and runs it
# with podman.

FROM debian:bookworm-slim AS build
WORKDIR /src
# The dependencies first: this layer survives source changes.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh build
COPY . .
RUN cmake --preset release
# ccache's directory is a build cache, kept between image builds (the release
# preset uses ccache when it finds it).
ENV CCACHE_DIR=/root/.cache/ccache
RUN --mount=type=cache,id=tpoold-ccache,target=/root/.cache/ccache \
    cmake --build --preset release --target package
# -> build/release/tpoold_<version>_amd64.deb
RUN deploy/container/runtime-rootfs.sh build/release/tpoold_*_amd64.deb /rootfs

FROM scratch AS runtime
COPY --from=build /rootfs/ /
ENV PATH=/usr/bin
# A fixed numeric user, so Kubernetes' runAsNonRoot can check it
# (deploy/k8s/deployment.yaml runs as 10001 too); runtime-rootfs.sh writes
# its passwd entry.
# Plugins: the packaged ones are in /usr/lib/tpool/plugins; mount your own
# (read-only) at /etc/tpoold/plugins.d. Both are in plugins.dirs of
# /etc/tpoold/tpoold.toml; mount a config of your own there to change it.
USER 10001:10001
# gRPC (JobService, AdminService, grpc.health.v1) and Prometheus /metrics.
EXPOSE 50051 9464
# SIGTERM drains: queued and running jobs finish (server.drain_timeout_ms,
# 30 s), then it exits 0. Give `docker stop` more time than that: -t 40.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["tpoolctl", "health"]
ENTRYPOINT ["tpoold"]
# The container listens on all interfaces; systemd installs keep loopback.
CMD ["--config", "/etc/tpoold/tpoold.toml", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464"]
