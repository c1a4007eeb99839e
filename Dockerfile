# tpoold container image: docs/operations.md, "Container".
#
#   docker build -t tpoold:0.1.0 .        (or podman build --format docker)
#   docker run --rm -p 50051:50051 -p 9464:9464 \
#     -v "$PWD/tls:/etc/tpoold/tls:ro" -v "$PWD/auth:/etc/tpoold/auth:ro" \
#     --tmpfs /run/tpoold:uid=10001,gid=10001,mode=0700 \
#     -v tpoold-state:/var/lib/tpoold tpoold:0.1.0   (podman's tmpfs: mode=0700,U)
#
# The secure path (issue 16): the image starts with
# /etc/tpoold/container.toml (deploy/container/tpoold.toml): the job port and
# /metrics on all interfaces, both over TLS with /etc/tpoold/tls/tls.crt and
# tls.key (ca.crt: the CA the HEALTHCHECK verifies them with), every call
# authenticated against /etc/tpoold/auth/tokens, the admin API on the Unix
# socket /run/tpoold/admin.sock inside the container, on no port. Without the
# mounts tpoold refuses to start and names the missing file.
#
# The build stage runs the same steps as CI and `make package`:
# scripts/install-deps.sh (group build) and the CMake release preset, which
# makes the Debian package. deploy/container/runtime-rootfs.sh unpacks that
# package and adds only the shared libraries its programs and plugins load
# (the closure dpkg-shlibdeps turns into the package's Depends), CA
# certificates, the daemon's user, the container config, /run/tpoold and
# /var/lib/tpoold (the store's volume); the
# runtime stage is that root alone, FROM scratch: no shell, no package
# manager, no compiler (about 30 MB).
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
# (deploy/k8s/statefulset.yaml runs as 10001 too); runtime-rootfs.sh writes
# its passwd entry.
# Plugins: the packaged ones are in /usr/lib/tpool/plugins; mount your own
# (read-only) at /etc/tpoold/plugins.d. Both are in plugins.dirs of
# /etc/tpoold/tpoold.toml; mount a config of your own there to change it.
USER 10001:10001
# The durable job store ([store] path = /var/lib/tpoold/jobs.db in
# container.toml; docs/store.md). runtime-rootfs.sh makes the directory
# 0700 and uid 10001's, which a new volume mounted here copies. Mount a named
# volume (or a directory of uid 10001) to keep durable jobs across containers:
#   docker run ... -v tpoold-state:/var/lib/tpoold tpoold:0.1.0
# Without one, each container gets an anonymous volume, which the next
# container does not see. Never share one between two running containers.
VOLUME /var/lib/tpoold
# gRPC (JobService, grpc.health.v1) and Prometheus /metrics, both TLS. The
# admin API is a Unix socket (/run/tpoold/admin.sock), never a port.
EXPOSE 50051 9464
# SIGTERM drains: queued and running jobs finish (server.drain_timeout_ms,
# 30 s), then it exits 0. Give `docker stop` more time than that: -t 40.
STOPSIGNAL SIGTERM
# Over TLS to the job port ($TPOOL_ADDRESS, else 127.0.0.1:50051), verified
# with the mounted CA: the certificate must name IP 127.0.0.1 (or set
# TPOOL_ADDRESS to a name it carries).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["tpoolctl", "--tls-ca", "/etc/tpoold/tls/ca.crt", "health"]
ENTRYPOINT ["tpoold"]
# The addresses, TLS and auth are in the config; systemd installs keep the
# package's loopback-only /etc/tpoold/tpoold.toml.
CMD ["--config", "/etc/tpoold/container.toml"]
