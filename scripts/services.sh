#!/usr/bin/env bash
# Installs (when missing) and starts the servers geodlq's integration tests
# run against, all on loopback: PostgreSQL 15 with PostGIS, Redis, NATS
# with JetStream, RabbitMQ, MariaDB, and local-aws-sqs for SQS (plus Debian's awscli,
# which the SQS verification test calls as /usr/bin/aws). Kafka (kfake),
# S3 (gofakes3) and Pub/Sub (pstest) run inside the tests.
# Idempotent: running servers are left alone.
# apt never starts services on these machines (policy-rc.d), so we do.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

pkgs=(postgresql postgresql-15-postgis-3 redis-server nats-server rabbitmq-server mariadb-server awscli)
# The console's browser tests (cmd/geodlq/internal/console) drive Debian's
# chromium with playwright-core.
pkgs+=(chromium)
# local-aws-sqs (broker/sqs's test server) runs on Node.js; use the
# machine's if it has one.
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "services: installing ${missing[*]}" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq || true
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && exec 3>&- 3<&-; }
wait_port() {
  local name=$1 port=$2 tries=${3:-120}
  for _ in $(seq "$tries"); do
    port_open "$port" && return 0
    sleep 0.5
  done
  echo "services: $name did not open port $port" >&2
  return 1
}

# --- PostgreSQL + PostGIS ---------------------------------------------------
if ! port_open 5432; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -z "$ver" ]; then
    $SUDO pg_createcluster 15 main >/dev/null
    ver=15
  fi
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  # Tests connect as postgres over 127.0.0.1 without a password.
  if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    $SUDO sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start
fi
wait_port PostgreSQL 5432
for _ in $(seq 60); do
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1 && break
  sleep 0.5
done
psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname='geodlq_test'" | grep -q 1 ||
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database geodlq_test' >/dev/null
psql -h 127.0.0.1 -U postgres -d geodlq_test -qc 'create extension if not exists postgis' >/dev/null

# --- Redis ------------------------------------------------------------------
if ! port_open 6379; then
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_port Redis 6379

# --- NATS with JetStream ----------------------------------------------------
if ! port_open 4222; then
  $SUDO mkdir -p /var/lib/nats-server
  $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
fi
wait_port NATS 4222

# --- RabbitMQ (loopback only) -------------------------------------------------
if ! port_open 5672; then
  if [ ! -s /etc/rabbitmq/rabbitmq.conf ] || ! grep -q 'listeners.tcp' /etc/rabbitmq/rabbitmq.conf; then
    echo 'listeners.tcp.local = 127.0.0.1:5672' | $SUDO tee -a /etc/rabbitmq/rabbitmq.conf >/dev/null
  fi
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  $SUDO env RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 ERL_EPMD_ADDRESS=127.0.0.1 rabbitmq-server -detached
fi
wait_port RabbitMQ 5672 240

# --- MariaDB (loopback only) ------------------------------------------------
# broker/mysql's tests connect as root over 127.0.0.1 without a password
# and use database test. skip-name-resolve makes 127.0.0.1 match the
# root@127.0.0.1 account (Debian's root@localhost authenticates by unix
# socket only).
if ! port_open 3306; then
  $SUDO mkdir -p /run/mysqld /var/log/mysql
  $SUDO chown mysql:mysql /run/mysqld /var/log/mysql
  if [ ! -d /var/lib/mysql/mysql ]; then
    $SUDO mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >/dev/null
  fi
  $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- \
    --user=mysql --datadir=/var/lib/mysql --bind-address=127.0.0.1 --port=3306 --skip-name-resolve \
    --socket=/run/mysqld/mysqld.sock --log-error=/var/log/mysql/error.log
fi
wait_port MariaDB 3306
for _ in $(seq 60); do
  mariadb -h 127.0.0.1 -u root -e 'select 1' >/dev/null 2>&1 && break
  # Over the socket as the OS root, which Debian's root@localhost admits.
  $SUDO mariadb --protocol=socket -u root -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION" >/dev/null 2>&1 || true
  sleep 0.5
done
mariadb -h 127.0.0.1 -u root -e 'CREATE DATABASE IF NOT EXISTS test'

# --- The console's npm packages (its page build and browser tests) -----------
ui="$(dirname "$0")/../cmd/geodlq/internal/console/ui"
if [ ! -f "$ui/node_modules/playwright-core/package.json" ] || [ ! -f "$ui/node_modules/esbuild/package.json" ]; then
  echo "services: installing the console's npm packages (npm ci in $ui)" >&2
  (cd "$ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

# --- The CloudEvents JS SDK (internal/contracttest's round trips) -------------
js="$(dirname "$0")/../internal/contracttest/js"
if [ ! -f "$js/node_modules/cloudevents/package.json" ]; then
  echo "services: installing the CloudEvents JS SDK (npm ci in $js)" >&2
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

# --- SQS (local-aws-sqs on Node.js) -------------------------------------------
"$(dirname "$0")/local-sqs.sh"

echo "services: PostgreSQL+PostGIS, Redis, NATS JetStream, RabbitMQ, MariaDB and SQS (local-aws-sqs) are up on 127.0.0.1; chromium, the console's npm packages and the CloudEvents JS SDK are installed" >&2
