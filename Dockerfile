# specroute gateway image: `docker build -t specroute . && docker run -p 8080:8080 specroute`
# With no policy mounted it serves the embedded simulated fleet; mount one and pass --config.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY loadtests ./loadtests
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
COPY policies /etc/specroute/policies
RUN useradd --system --uid 10001 --no-create-home specroute
USER specroute
EXPOSE 8080
ENV SPECROUTE_HOST=0.0.0.0 SPECROUTE_PORT=8080
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health').status != 200)"
ENTRYPOINT ["specroute", "serve"]
