# devshare: the scheduler extender, the webhook and the node agent are all this one image.
# (The agent runs as root on the node: it writes the kubelet's device-plugin socket directory.)
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir .
ENTRYPOINT ["devshare"]
