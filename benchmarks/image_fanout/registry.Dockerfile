# A registry image for the simulated fleet, where `registry:2` cannot be pulled: the distribution
# registry from Debian's docker-registry package. Same environment interface as registry:2
# (REGISTRY_HTTP_ADDR, REGISTRY_HTTP_TLS_CERTIFICATE/KEY, REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY).
FROM dgxspark-sim/debian:bookworm
COPY ca-bundle.crt /etc/ssl/certs/sim-host-ca-bundle.crt
RUN apt-get -o Acquire::https::CaInfo=/etc/ssl/certs/sim-host-ca-bundle.crt update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker-registry ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
