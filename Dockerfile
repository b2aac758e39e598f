# loopguard serve in a container: built with the `dist` profile (stripped, fat LTO), run
# as an unprivileged user, state in an SQLite file on a volume.
#
#   docker build -t loopguard .
#   docker run -d --name loopguard -p 127.0.0.1:7671:7671 \
#     -e LOOPGUARD_TOKEN=change-me -v loopguard-data:/var/lib/loopguard loopguard
#
# A config: mount it and name it, e.g. `-v $PWD/openclaw.json5:/etc/loopguard/config.json5:ro
# -e LOOPGUARD_CONFIG=/etc/loopguard/config.json5` (without one, detection is on at the
# default thresholds). The server listens on 0.0.0.0 inside the container so that the
# published port reaches it: give it a token (LOOPGUARD_TOKEN) or publish on loopback only.

FROM rust:1.88-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --profile dist -p loopguard-cli \
 && install -D target/dist/loopguard /out/loopguard

FROM debian:bookworm-slim
# CA certificates for rediss:// stores (rustls reads the system's roots).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/loopguard --create-home loopguard
COPY --from=build /out/loopguard /usr/local/bin/loopguard
USER loopguard
ENV LOOPGUARD_DB=/var/lib/loopguard/loopguard.db \
    LOOPGUARD_LISTEN=0.0.0.0:7671
VOLUME ["/var/lib/loopguard"]
EXPOSE 7671
ENTRYPOINT ["loopguard"]
CMD ["serve"]
