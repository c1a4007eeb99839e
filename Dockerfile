# tpoold container image: docs/operations.md, "Container".
#
#   docker build -t tpoold:0.1.0 .
#   docker run --rm -p 50051:50051 -p 9464:9464 tpoold:0.1.0
#
# The build stage runs the same steps as CI and `make package`:
# scripts/install-deps.sh (group build) and the CMake release preset, which
# makes the Debian package. The runtime stage installs that package, so its
# library dependencies are exactly what dpkg-shlibdeps found: runtime
# libraries only, no compilers, no -dev packages. ctest deploy.docker.build_steps
# runs this file's build-stage commands on every `make test`.

FROM debian:bookworm-slim AS build
WORKDIR /src
COPY . .
RUN scripts/install-deps.sh build
RUN cmake --preset release
RUN cmake --build --preset release --target package
# -> build/release/tpoold_<version>_amd64.deb

FROM debian:bookworm-slim AS runtime
# A fixed numeric user, so Kubernetes' runAsNonRoot can check it
# (deploy/k8s/deployment.yaml runs as 10001 too). The package's postinst
# finds the user and keeps it.
RUN groupadd --system --gid 10001 tpoold \
 && useradd --system --uid 10001 --gid tpoold --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin tpoold
COPY --from=build /src/build/release/tpoold_*_amd64.deb /tmp/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/tpoold_*_amd64.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/tpoold_*_amd64.deb
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
