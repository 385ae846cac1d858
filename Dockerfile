# toolwatch container image.
#   docker build --build-arg TOOLWATCH_REVISION=$(git describe --always --dirty) -t toolwatch .
#   docker run ... toolwatch serve --config ...   (docs/deployment.md: the image holds no policy)
# Installs the package from this source tree with pip, exactly as the README's install does.
# Every dependency ships wheels for this base image; the build stage has a C compiler only for
# toolwatch's own compiled parts, the OTLP scanner and the hot path mypyc compiles, and fails
# if either did not build (the image would otherwise run them as Python, at about twice the
# CPU per span). The runtime stage has no compiler.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
RUN python -m venv /opt/toolwatch \
 && /opt/toolwatch/bin/pip install . \
 && /opt/toolwatch/bin/python -c "from toolwatch.ingest.scan import COMPILED_UNAVAILABLE as why; assert not why, why" \
 && /opt/toolwatch/bin/python -c "from toolwatch import compiled as c, compiled_state; s = compiled_state.state(); assert len(s.compiled) == len(c.MODULES), s.describe()"

FROM python:3.11-slim-bookworm
# Same base image as the build stage, so the virtualenv's interpreter path stays valid.
COPY --from=build /opt/toolwatch /opt/toolwatch
# Which build this is (.git is not in the build context): toolwatch_build_info{revision} and
# `toolwatch --version` say it, so that during a rollout old pods and new ones tell apart
# (__version__ names a release, not a commit). Letters, digits and . _ + - only.
ARG TOOLWATCH_REVISION=unknown
ENV TOOLWATCH_REVISION=$TOOLWATCH_REVISION \
    PATH=/opt/toolwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# A numeric, non-root user: Kubernetes can then verify runAsNonRoot from the image alone.
RUN groupadd --system --gid 10001 toolwatch \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin toolwatch
USER 10001:10001

# OTLP gRPC, OTLP HTTP, Prometheus /metrics (+ /healthz, /readyz).
EXPOSE 4317 4318 9464

# Asks /healthz over plain HTTP, or over TLS when the metrics listener has it (--tls-cert and
# security.tls put TLS on it by default): toolwatch.healthcheck finds out which. Follows the
# default --metrics-listen port below; give the check another port as its argument.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-m", "toolwatch.healthcheck", "127.0.0.1:9464"]

ENTRYPOINT ["toolwatch"]
# In a container the listeners must bind every interface to be reachable; toolwatch's own
# defaults are loopback, which is right for a bare-metal sidecar.
CMD ["serve", "--grpc-listen", "0.0.0.0:4317", "--http-listen", "0.0.0.0:4318", "--metrics-listen", "0.0.0.0:9464"]
