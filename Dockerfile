# syntax=docker/dockerfile:1
# The controller image: a release build of `karpenter` on a distroless, non-root runtime.
#   docker build --build-arg KARPENTER_COMMIT=$(git rev-parse --short=7 HEAD) -t karpenter:dev .
# Built without default features: no `simulate` command, and no tokio test-util in the binary.
# The release profile strips symbols (Cargo.toml).

FROM rust:1.95-bookworm AS build
# The context has no .git (.dockerignore): the commit of the log lines' `commit` field comes in
# as a build argument; without it the daemon says `Unable to read vcs.revision from binary`.
ARG KARPENTER_COMMIT=""
ENV KARPENTER_COMMIT=${KARPENTER_COMMIT}
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --bin karpenter \
    && install -D target/release/karpenter /out/karpenter

# glibc and CA certificates only; no shell, no package manager. uid/gid 65532 as in the chart.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/karpenter /karpenter
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/karpenter"]
CMD ["run"]
