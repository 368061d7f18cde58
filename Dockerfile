# notifyd in a container: build with the official Swift image, run on Debian slim as a non-root user.
#
#   docker build -t notifyd .
#   docker volume create notifyd-socket
#   docker run -d --name notifyd -v notifyd-socket:/run/notifyd notifyd
#   docker run --rm -v notifyd-socket:/run/notifyd --entrypoint notifyctl notifyd post com.example.hello hi --wait
#
# Other containers share the socket through the volume and find it through NOTIFYD_SOCKET (see README.md,
# "Container").

# ---- build ----------------------------------------------------------------------------------------------------
FROM swift:6.3-bookworm AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# libsystemd-dev: the CSystemd module (sd_notify, socket activation, journal). Package versions follow the
# bookworm security updates on purpose, hence no pins.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libsystemd-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .
# The Swift standard library and Foundation are linked statically, so the runtime image needs no Swift
# libraries at all; the check below fails the build if a binary still wants one.
RUN --mount=type=cache,target=/src/.build \
    swift build -c release --static-swift-stdlib --product notifyd \
    && swift build -c release --static-swift-stdlib --product notifyctl \
    && bin="$(swift build -c release --static-swift-stdlib --show-bin-path)" \
    && install -D -m 0755 "$bin/notifyd" /out/notifyd \
    && install -D -m 0755 "$bin/notifyctl" /out/notifyctl \
    && ldd /out/notifyd /out/notifyctl \
    && if ldd /out/notifyd /out/notifyctl | grep -E 'libswift|libFoundation|libdispatch|libBlocksRuntime'; then \
         echo "a Swift runtime library is still linked dynamically" >&2; exit 1; \
       fi

# ---- runtime --------------------------------------------------------------------------------------------------
FROM debian:bookworm-slim
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# What the binaries link besides glibc: libsystemd0 and libstdc++6 (with libgcc-s1, part of the base image).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libsystemd0 libstdc++6 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 notifyd \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --home-dir /nonexistent \
       --shell /usr/sbin/nologin notifyd \
    && install -d -m 0755 -o notifyd -g notifyd /run/notifyd

COPY --from=build /out/notifyd /out/notifyctl /usr/local/bin/
RUN if ldd /usr/local/bin/notifyd /usr/local/bin/notifyctl | grep 'not found'; then exit 1; fi

# The daemon listens here, and clients (notifyctl, programs using the Notify library) connect here.
ENV NOTIFYD_SOCKET=/run/notifyd/notifyd.sock
# Share the socket's directory with other containers: mount the same volume there.
VOLUME ["/run/notifyd"]
USER 10001:10001

# Healthy when the daemon answers requests over its socket.
HEALTHCHECK --interval=30s --timeout=5s --start-period=5s --retries=3 CMD ["notifyctl", "status"]

ENTRYPOINT ["notifyd"]
# Socket mode 666: containers running as other users may connect (the volume is the boundary). Plain stderr
# logging for `docker logs`.
CMD ["--socket-mode", "666", "--log", "stderr"]
