#!/usr/bin/env bash
# Installs (when missing) and starts local-aws-sqs, an SQS server that speaks
# the JSON protocol of aws-sdk-go-v2 service/sqs v1.53, on 127.0.0.1 for
# broker/sqs's tests and examples/sqs-consumer's TestDemo.
#
# The npm package is installed into a cache directory outside the repository
# (no node_modules, no lockfile in the tree). Idempotent: when the port is
# already listening, nothing is started.
#
#   GEODLQ_SQS_PORT   port to listen on (default 9324)
#   GEODLQ_SQS_CACHE  install directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/geodlq/local-aws-sqs)
#
# Tests find the server through GEODLQ_TEST_SQS (default http://127.0.0.1:9324).
set -euo pipefail

version=2.0.2
port=${GEODLQ_SQS_PORT:-9324}
cache=${GEODLQ_SQS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/geodlq/local-aws-sqs}
log=$cache/server.log

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && exec 3>&- 3<&-; }

if port_open "$port"; then
  exit 0
fi

command -v node >/dev/null || { echo "local-sqs: node (>= 18) is required" >&2; exit 1; }
command -v npm >/dev/null || { echo "local-sqs: npm is required" >&2; exit 1; }

pkg=$cache/node_modules/local-aws-sqs/package.json
if [ ! -f "$pkg" ] || ! grep -q "\"version\": \"$version\"" "$pkg"; then
  echo "local-sqs: installing local-aws-sqs@$version into $cache" >&2
  mkdir -p "$cache"
  # A private package.json keeps npm from walking up into another project.
  [ -f "$cache/package.json" ] || echo '{"name":"geodlq-local-sqs","private":true}' >"$cache/package.json"
  npm install --prefix "$cache" --no-audit --no-fund --no-package-lock --silent "local-aws-sqs@$version" >&2
fi

cat >"$cache/server.js" <<'EOF'
// Started by geodlq's scripts/local-sqs.sh.
const { createSqsServer } = require("local-aws-sqs");
const port = Number(process.env.GEODLQ_SQS_PORT || 9324);
createSqsServer({
  port,
  hostname: "127.0.0.1",
  // Tests create uniquely named queues; deleting and re-creating a name at
  // once is allowed here (AWS makes you wait 60 s).
  emulateQueueCreationLifecycle: false,
}).then(() => console.log(`local-aws-sqs listening on 127.0.0.1:${port}`));
EOF

GEODLQ_SQS_PORT=$port nohup node "$cache/server.js" >>"$log" 2>&1 </dev/null &
disown || true

for _ in $(seq 60); do
  port_open "$port" && exit 0
  sleep 0.25
done
echo "local-sqs: local-aws-sqs did not open port $port (see $log)" >&2
exit 1
