# A registry image for the simulated fleet, where `registry:2` cannot be pulled: the distribution
# registry from Debian's docker-registry package. Same environment interface as registry:2
# (REGISTRY_HTTP_ADDR, REGISTRY_HTTP_TLS_CERTIFICATE/KEY, REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY).
FROM dgxspark-sim/debian:bookworm
COPY ca-bundle.crt /etc/ssl/certs/sim-host-ca-bundle.crt
RUN apt-get -o Acquire::https::CaInfo=/etc/ssl/certs/sim-host-ca-bundle.crt update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker-registry ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
# Debian's default config turns on htpasswd auth; registry:2 serves without auth (TLS comes from
# the environment image_sync sets).
RUN printf '%s\n' 'version: 0.1' 'log: {fields: {service: registry}}' \
      'storage: {cache: {blobdescriptor: inmemory}, filesystem: {rootdirectory: /var/lib/registry}}' \
      'http: {addr: ":5000", headers: {X-Content-Type-Options: [nosniff]}}' > /etc/docker/registry/config.yml
ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
