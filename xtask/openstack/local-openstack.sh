#!/bin/bash
# A loopback-only OpenStack for the OpenStack provider's integration tests, from Debian's own packages
# (bookworm, OpenStack Zed): Keystone, Placement, Nova (fake virt driver), Glance (file store), Neutron
# (ML2 `test` mechanism driver, no agents) and Octavia (amphora provider with noop drivers).
#
# Driven by `cargo xtask openstack install|start|stop|status` (xtask/src/openstack.rs), which picks
# free ports and passes them in the environment. Runs as root; everything lives under $BASE.
#
#   install   apt packages (~4 min, ~760 MB)
#   start     databases, broker, services, service catalog, a baseline (image, flavors, external
#             network); writes $BASE/clouds.yaml and $BASE/ports.env; ~2 min
#   stop      stops every process this script started, removes $BASE
#
# Workarounds, each needed on this platform:
# - Keystone on SQLite fails under concurrent writes: a private PostgreSQL.
# - uwsgi `--http-socket` mishandles kept-alive connections: it answers with `Connection: close`.
# - Port binding without agents: the ML2 `test` mechanism driver binds ports whose host is
#   `host-ovs-filter-active`, so nova-compute runs under that host name; neutron-server runs with
#   PYTHONOPTIMIZE=1 because the test driver asserts on something a real deployment does.
# - Octavia's migrations are MySQL-only: a private MariaDB. Octavia wants a client CA even with noop
#   drivers.
# - The nova-compute package pulls libvirt and qemu: the fake compute service starts from Python.
# Limits: no Cinder, no metadata service or DHCP, the Octavia VIP port is not in Neutron (no floating
# IP on it), operating status stays OFFLINE.
set -euo pipefail
BASE=${BASE:-/tmp/capi-rs-openstack}
PW=${OS_TEST_PASSWORD:-capi-rs-local}
KEYSTONE_PORT=${KEYSTONE_PORT:-5000}
PLACEMENT_PORT=${PLACEMENT_PORT:-8778}
NOVA_PORT=${NOVA_PORT:-8774}
GLANCE_PORT=${GLANCE_PORT:-9292}
NEUTRON_PORT=${NEUTRON_PORT:-9696}
OCTAVIA_PORT=${OCTAVIA_PORT:-9876}
RABBIT_PORT=${RABBIT_PORT:-5672}
RABBIT_DIST_PORT=${RABBIT_DIST_PORT:-25672}
EPMD_PORT=${EPMD_PORT:-4369}
PG_PORT=${PG_PORT:-15432}
MYSQL_PORT=${MYSQL_PORT:-13306}
KS=http://127.0.0.1:$KEYSTONE_PORT/v3
PG="postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT"
RABBIT="rabbit://guest:guest@127.0.0.1:$RABBIT_PORT/"
PACKAGES="keystone placement-api nova-api nova-conductor nova-scheduler glance-api neutron-api
  neutron-rpc-server octavia-api octavia-worker rabbitmq-server postgresql mariadb-server python3-psycopg2
  python3-pymysql python3-keystoneclient openssl curl"
T0=$(date +%s)
say() { echo "    [$(($(date +%s) - T0))s] $*"; }
die() { echo "local-openstack: $*" >&2; exit 1; }

# bg NAME cmd…: starts a detached process in its own session (so stop can kill its whole group).
bg() {
  local name=$1; shift
  setsid "$@" > "$BASE/log/$name.out" 2>&1 < /dev/null &
  echo $! > "$BASE/pids/$name.pid"
}
# wait_http URL NAME: until URL answers, or fail showing the end of NAME's logs.
wait_http() {
  for _ in $(seq 1 360); do curl -s -o /dev/null --max-time 2 "$1" && return 0; sleep 0.5; done
  show_logs "$2"; die "timed out waiting for $2 at $1"
}
show_logs() {
  for f in "$BASE"/log/"$1"*; do [ -f "$f" ] && { echo "--- $f (last 40 lines)" >&2; tail -n 40 "$f" >&2; }; done
}
authtoken() {
cat <<EOF
[$1]
www_authenticate_uri = $KS
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
region_name = RegionOne
username = $2
password = $PW
EOF
}
POLICY=$'[oslo_policy]\nenforce_new_defaults = false\nenforce_scope = false'

install() {
  local missing=""
  for p in $PACKAGES; do dpkg -s "$p" > /dev/null 2>&1 || missing="$missing $p"; done
  if [ -z "$missing" ]; then echo "    OpenStack packages are installed"; return; fi
  echo "    installing:$missing (about 4 minutes)"
  apt-get update -q > /dev/null
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 $missing
  # Package scripts may start the distribution's own services; ours are private instances.
  stop_system_services
}

stop_system_services() {
  for s in rabbitmq-server postgresql mariadb; do service "$s" stop > /dev/null 2>&1 || true; done
  pkill -u rabbitmq -f beam.smp > /dev/null 2>&1 || true
  pkill -x epmd > /dev/null 2>&1 || true
}

stop() {
  [ -d "$BASE" ] || { echo "    not running"; return; }
  local groups=""
  for f in "$BASE"/pids/*.pid; do
    [ -f "$f" ] || continue
    case "$(basename "$f")" in mariadb.pid|rabbitmq.pid) continue ;; esac
    groups="$groups $(cat "$f")"
  done
  # OpenStack services first (they talk to the broker and databases while shutting down).
  for g in $groups; do kill -TERM -- "-$g" 2> /dev/null || true; done
  for _ in $(seq 1 40); do
    local alive=""
    for g in $groups; do kill -0 -- "-$g" 2> /dev/null && alive="$alive $g"; done
    [ -z "$alive" ] && break; sleep 0.5
  done
  for g in $groups; do kill -KILL -- "-$g" 2> /dev/null || true; done
  # The broker: every process of its session (the launcher, beam, epmd started for it).
  if [ -f "$BASE/pids/rabbitmq.pid" ]; then
    local r; r=$(cat "$BASE/pids/rabbitmq.pid")
    kill -TERM -- "-$r" 2> /dev/null || true; sleep 2; kill -KILL -- "-$r" 2> /dev/null || true
  fi
  pkill -f "beam.smp.*$BASE/rabbit" 2> /dev/null || true
  ERL_EPMD_PORT=$EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1 epmd -kill > /dev/null 2>&1 || true
  if [ -d "$BASE/pg/data" ]; then
    su postgres -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D $BASE/pg/data -m immediate stop" > /dev/null 2>&1 || true
  fi
  if [ -f "$BASE/pids/mariadb.pid" ]; then
    local m; m=$(cat "$BASE/pids/mariadb.pid")
    kill -TERM -- "-$m" 2> /dev/null || true
    for _ in $(seq 1 20); do kill -0 -- "-$m" 2> /dev/null || break; sleep 0.5; done
    kill -KILL -- "-$m" 2> /dev/null || true
  fi
  rm -rf "$BASE"
  echo "    stopped"
}

databases() {
  chown postgres "$BASE/pg"; chown mysql "$BASE/mysql"; chown rabbitmq "$BASE/rabbit"
  su postgres -s /bin/bash -c "/usr/lib/postgresql/15/bin/initdb -D $BASE/pg/data -A trust -U postgres > $BASE/log/pg-initdb.out 2>&1 && \
    /usr/lib/postgresql/15/bin/pg_ctl -D $BASE/pg/data -l $BASE/log/postgres.log -w \
      -o '-c listen_addresses=127.0.0.1 -p $PG_PORT -k $BASE/pg -c max_connections=300 -c fsync=off -c synchronous_commit=off' start > /dev/null" \
    || { show_logs postgres; die "PostgreSQL did not start"; }
  for db in keystone placement nova_api nova nova_cell0 glance neutron; do
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "create database $db"
  done
  mariadb-install-db --user=mysql --datadir="$BASE/mysql/data" --auth-root-authentication-method=normal \
    --skip-test-db > "$BASE/log/mariadb-install.out" 2>&1 || { show_logs mariadb; die "mariadb-install-db failed"; }
  bg mariadb /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$BASE/mysql/data" --bind-address=127.0.0.1 \
    --port="$MYSQL_PORT" --socket="$BASE/mysql/mysqld.sock" --pid-file="$BASE/mysql/mysqld.pid" \
    --skip-name-resolve --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0
  cat > "$BASE/rabbit/env.sh" <<EOF
export RABBITMQ_CONFIG_FILE=$BASE/rabbit/rabbitmq.conf RABBITMQ_MNESIA_BASE=$BASE/rabbit/mnesia
export RABBITMQ_LOG_BASE=$BASE/rabbit/log RABBITMQ_NODENAME=capi-rs@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$EPMD_PORT
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_ENABLED_PLUGINS_FILE=$BASE/rabbit/enabled_plugins HOME=$BASE/rabbit
EOF
  printf 'listeners.tcp.default = 127.0.0.1:%s\nloopback_users = none\n' "$RABBIT_PORT" > "$BASE/rabbit/rabbitmq.conf"
  echo '[].' > "$BASE/rabbit/enabled_plugins"; chown -R rabbitmq "$BASE/rabbit"
  setsid su rabbitmq -s /bin/bash -c ". $BASE/rabbit/env.sh; exec /usr/lib/rabbitmq/bin/rabbitmq-server" \
    > "$BASE/log/rabbitmq.out" 2>&1 < /dev/null &
  echo $! > "$BASE/pids/rabbitmq.pid"
  for _ in $(seq 1 120); do mariadb -h 127.0.0.1 -P "$MYSQL_PORT" -u root -e 'select 1' > /dev/null 2>&1 && break; sleep 0.5; done
  mariadb -h 127.0.0.1 -P "$MYSQL_PORT" -u root -e "CREATE DATABASE octavia; CREATE USER 'octavia'@'127.0.0.1' IDENTIFIED BY '$PW'; GRANT ALL ON octavia.* TO 'octavia'@'127.0.0.1';" \
    || { show_logs mariadb; die "MariaDB did not start"; }
  say "PostgreSQL :$PG_PORT, MariaDB :$MYSQL_PORT up"
}

keystone() {
  cat > "$BASE/keystone/keystone.conf" <<EOF
[DEFAULT]
log_dir = $BASE/log
log_file = keystone.log
[database]
connection = $PG/keystone
[token]
provider = fernet
[fernet_tokens]
key_repository = $BASE/keystone/fernet-keys
[fernet_receipts]
key_repository = $BASE/keystone/fernet-keys
[credential]
key_repository = $BASE/keystone/credential-keys
[identity]
password_hash_rounds = 4
EOF
  local k="keystone-manage --config-file $BASE/keystone/keystone.conf"
  { $k db_sync && $k fernet_setup --keystone-user root --keystone-group root \
      && $k credential_setup --keystone-user root --keystone-group root \
      && $k bootstrap --bootstrap-password "$PW" --bootstrap-admin-url "$KS/" --bootstrap-internal-url "$KS/" \
           --bootstrap-public-url "$KS/" --bootstrap-region-id RegionOne; } > "$BASE/log/keystone-manage.out" 2>&1 \
    || { show_logs keystone-manage; die "keystone-manage failed"; }
  OS_KEYSTONE_CONFIG_FILES=$BASE/keystone/keystone.conf bg keystone uwsgi --plugins python3 \
    --http-socket "127.0.0.1:$KEYSTONE_PORT" --wsgi-file /usr/bin/keystone-wsgi-public --master --processes 2 \
    --threads 2 --lazy-apps --die-on-term --enable-threads --buffer-size 65535 --add-header "Connection: close"
  wait_http "$KS" keystone
  say "Keystone :$KEYSTONE_PORT up"
  /usr/bin/python3 - "$KS" "$PW" "$PLACEMENT_PORT" "$NOVA_PORT" "$GLANCE_PORT" "$NEUTRON_PORT" "$OCTAVIA_PORT" <<'EOF' \
    > "$BASE/log/register.out" 2>&1 || { show_logs register; die "registering the service catalog failed"; }
import sys
from keystoneauth1.identity import v3
from keystoneauth1 import session
from keystoneclient.v3 import client
ks_url, pw, placement, nova, glance, neutron, octavia = sys.argv[1:]
auth = v3.Password(auth_url=ks_url, username="admin", password=pw, project_name="admin",
                   user_domain_id="default", project_domain_id="default")
ks = client.Client(session=session.Session(auth=auth), connect_retries=3)
admin = [r for r in ks.roles.list() if r.name == "admin"][0]
service = ks.projects.create("service", "default")
for name, kind, url in [
    ("placement", "placement", f"http://127.0.0.1:{placement}"),
    ("nova", "compute", f"http://127.0.0.1:{nova}/v2.1"),
    ("glance", "image", f"http://127.0.0.1:{glance}"),
    ("neutron", "network", f"http://127.0.0.1:{neutron}"),
    ("octavia", "load-balancer", f"http://127.0.0.1:{octavia}"),
]:
    user = ks.users.create(name, domain="default", password=pw)
    ks.roles.grant(admin, user=user, project=service)
    svc = ks.services.create(name, type=kind)
    for interface in ("public", "internal", "admin"):
        ks.endpoints.create(svc, url, interface=interface, region="RegionOne")
print("registered")
EOF
  say "service catalog registered"
}

services() {
  { printf '[DEFAULT]\nlog_dir = %s\nlog_file = placement.log\n[placement_database]\nconnection = %s/placement\n[api]\nauth_strategy = keystone\n' "$BASE/log" "$PG"
    authtoken keystone_authtoken placement; echo "$POLICY"; } > "$BASE/placement/placement.conf"
  placement-manage --config-file "$BASE/placement/placement.conf" db sync > "$BASE/log/placement-dbsync.out" 2>&1 \
    || { show_logs placement-dbsync; die "placement db sync failed"; }
  OS_PLACEMENT_CONFIG_DIR=$BASE/placement bg placement uwsgi --plugins python3 --http-socket "127.0.0.1:$PLACEMENT_PORT" \
    --wsgi-file /usr/bin/placement-api --master --processes 1 --threads 4 --lazy-apps --die-on-term --enable-threads \
    --buffer-size 65535 --add-header "Connection: close"

  { cat <<EOF
[DEFAULT]
bind_host = 127.0.0.1
bind_port = $GLANCE_PORT
workers = 1
log_dir = $BASE/log
log_file = glance-api.log
enabled_backends = file:file
[database]
connection = $PG/glance
[paste_deploy]
flavor = keystone
config_file = /etc/glance/glance-api-paste.ini
[glance_store]
default_backend = file
[file]
filesystem_store_datadir = $BASE/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $BASE/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $BASE/glance/tasks
EOF
    authtoken keystone_authtoken glance; echo "$POLICY"; } > "$BASE/glance/glance-api.conf"
  glance-manage --config-file "$BASE/glance/glance-api.conf" db_sync > "$BASE/log/glance-dbsync.out" 2>&1 \
    || { show_logs glance-dbsync; die "glance db sync failed"; }
  bg glance-api /usr/bin/glance-api --config-file "$BASE/glance/glance-api.conf"

  { cat <<EOF
[DEFAULT]
bind_host = 127.0.0.1
bind_port = $NEUTRON_PORT
api_workers = 1
rpc_workers = 0
rpc_state_report_workers = 0
log_dir = $BASE/log
log_file = neutron-server.log
auth_strategy = keystone
core_plugin = ml2
service_plugins = router,segments
transport_url = $RABBIT
api_paste_config = /etc/neutron/api-paste.ini
state_path = $BASE/neutron
[database]
connection = $PG/neutron
[oslo_concurrency]
lock_path = $BASE/neutron/lock
[ml2]
type_drivers = flat,vlan,vxlan,local
tenant_network_types = vxlan
mechanism_drivers = test
extension_drivers = port_security
[ml2_type_flat]
flat_networks = public
[ml2_type_vxlan]
vni_ranges = 1:1000
EOF
    authtoken keystone_authtoken neutron; authtoken nova nova; echo "$POLICY"; } > "$BASE/neutron/neutron.conf"
  neutron-db-manage --config-file "$BASE/neutron/neutron.conf" upgrade head > "$BASE/log/neutron-dbsync.out" 2>&1 \
    || { show_logs neutron-dbsync; die "neutron db migration failed"; }
  PYTHONOPTIMIZE=1 bg neutron-server /usr/bin/neutron-server --config-file "$BASE/neutron/neutron.conf"

  { cat <<EOF
[DEFAULT]
host = host-ovs-filter-active
my_ip = 127.0.0.1
state_path = $BASE/nova/state
log_dir = $BASE/log
transport_url = $RABBIT
compute_driver = fake.FakeDriver
enabled_apis = osapi_compute
osapi_compute_listen = 127.0.0.1
osapi_compute_listen_port = $NOVA_PORT
osapi_compute_workers = 1
[api]
auth_strategy = keystone
[api_database]
connection = $PG/nova_api
[database]
connection = $PG/nova
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 2
[glance]
api_servers = http://127.0.0.1:$GLANCE_PORT
[oslo_concurrency]
lock_path = $BASE/nova/lock
[vnc]
enabled = false
EOF
    authtoken keystone_authtoken nova; authtoken placement placement; authtoken neutron neutron; echo "$POLICY"; } > "$BASE/nova/nova.conf"
  local n="nova-manage --config-file $BASE/nova/nova.conf"
  { $n api_db sync && $n cell_v2 map_cell0 --database_connection "$PG/nova_cell0" \
      && $n cell_v2 create_cell --name=cell1 && $n db sync; } > "$BASE/log/nova-manage.out" 2>&1 \
    || { show_logs nova-manage; die "nova-manage failed"; }
  for s in api conductor scheduler; do bg "nova-$s" "/usr/bin/nova-$s" --config-file "$BASE/nova/nova.conf"; done
  bg nova-compute /usr/bin/python3 -c "import sys; sys.argv=['nova-compute','--config-file','$BASE/nova/nova.conf']; from nova.cmd.compute import main; sys.exit(main())"

  openssl req -x509 -newkey rsa:2048 -keyout "$BASE/octavia/certs/ca.key" -passout pass:capi-rs-local \
    -out "$BASE/octavia/certs/ca.crt" -days 30 -subj /CN=octavia-test-ca 2> /dev/null
  { cat <<EOF
[DEFAULT]
transport_url = $RABBIT
log_dir = $BASE/log
[api_settings]
bind_host = 127.0.0.1
bind_port = $OCTAVIA_PORT
auth_strategy = keystone
enabled_provider_drivers = amphora:'Amphora (noop drivers)',noop_driver:'noop'
default_provider_driver = amphora
[database]
connection = mysql+pymysql://octavia:$PW@127.0.0.1:$MYSQL_PORT/octavia
[controller_worker]
client_ca = $BASE/octavia/certs/ca.crt
workers = 1
amphora_driver = amphora_noop_driver
compute_driver = compute_noop_driver
network_driver = network_noop_driver
volume_driver = volume_noop_driver
image_driver = image_noop_driver
loadbalancer_topology = SINGLE
amp_image_tag = amphora
amp_flavor_id = 1
amp_boot_network_list = 00000000-0000-0000-0000-000000000001
amp_secgroup_list = 00000000-0000-0000-0000-000000000002
[task_flow]
jobboard_enabled = false
# Each flow on the thread that received it: with the default parallel engine, a worker's thread
# pool once hung a load balancer's creation for good (eventlet: "cannot switch to a different
# thread"), leaving it PENDING_CREATE.
engine = serial
[certificates]
ca_certificate = $BASE/octavia/certs/ca.crt
ca_private_key = $BASE/octavia/certs/ca.key
ca_private_key_passphrase = capi-rs-local
server_certs_key_passphrase = insecure-key-do-not-use-this-key
[haproxy_amphora]
client_cert = $BASE/octavia/certs/ca.crt
server_ca = $BASE/octavia/certs/ca.crt
[health_manager]
bind_ip = 127.0.0.1
heartbeat_key = insecure
[oslo_messaging]
topic = octavia_prov
EOF
    authtoken keystone_authtoken octavia; authtoken service_auth octavia; echo "$POLICY"; } > "$BASE/octavia/octavia.conf"
  octavia-db-manage --config-file "$BASE/octavia/octavia.conf" upgrade head > "$BASE/log/octavia-dbsync.out" 2>&1 \
    || { show_logs octavia-dbsync; die "octavia db migration failed"; }
  bg octavia-api /usr/bin/octavia-api --config-file "$BASE/octavia/octavia.conf"
  bg octavia-worker /usr/bin/octavia-worker --config-file "$BASE/octavia/octavia.conf"

  wait_http "http://127.0.0.1:$PLACEMENT_PORT/" placement
  wait_http "http://127.0.0.1:$GLANCE_PORT/" glance-api
  wait_http "http://127.0.0.1:$NEUTRON_PORT/" neutron-server
  wait_http "http://127.0.0.1:$NOVA_PORT/" nova-api
  wait_http "http://127.0.0.1:$OCTAVIA_PORT/" octavia-api
  say "Placement, Glance, Neutron, Nova, Octavia APIs answer"
}

# The baseline a test cloud is expected to have (like devstack's): an image, flavors, a key pair, the `public`
# external network with a subnet, and an up hypervisor.
baseline() {
  head -c 1048576 /dev/zero > "$BASE/fake.img"
  /usr/bin/python3 - "$KS" "$PW" "$BASE/fake.img" <<'EOF' > "$BASE/log/baseline.out" 2>&1 || { show_logs baseline; show_logs nova-compute; die "baseline failed"; }
import sys, time
from keystoneauth1.identity import v3
from keystoneauth1 import session
ks_url, pw, image_file = sys.argv[1:]
s = session.Session(auth=v3.Password(auth_url=ks_url, username="admin", password=pw, project_name="admin",
                                     user_domain_id="default", project_domain_id="default"))
def call(method, service, path, **kw):
    r = s.request(path, method, endpoint_filter={"service_type": service, "interface": "public"},
                  raise_exc=True, **kw)
    return r.json() if r.content else None
image = call("POST", "image", "/v2/images", json={"name": "capi-rs-test-image", "disk_format": "raw",
             "container_format": "bare", "visibility": "public"})
with open(image_file, "rb") as f:
    call("PUT", "image", f"/v2/images/{image['id']}/file", data=f.read(),
         headers={"Content-Type": "application/octet-stream"})
for name, vcpus, ram, disk in [("m1.small", 2, 2048, 20), ("m1.medium", 2, 4096, 20)]:
    call("POST", "compute", "/flavors", json={"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}})
# A key pair for the provider's templates (`sshKeyName`); Nova generates the key (microversion 2.1).
call("POST", "compute", "/os-keypairs", json={"keypair": {"name": "capi-rs-test-key"}})
net = call("POST", "network", "/v2.0/networks", json={"network": {"name": "public", "router:external": True,
           "provider:network_type": "flat", "provider:physical_network": "public"}})["network"]
call("POST", "network", "/v2.0/subnets", json={"subnet": {"name": "public-subnet", "network_id": net["id"],
     "ip_version": 4, "cidr": "172.24.4.0/24", "enable_dhcp": False}})
for _ in range(240):
    hv = call("GET", "compute", "/os-hypervisors/detail")["hypervisors"]
    if any(h.get("state") == "up" for h in hv):
        break
    time.sleep(0.5)
else:
    sys.exit("no hypervisor came up")
print("baseline ready")
EOF
  say "baseline: image capi-rs-test-image, flavors m1.small/m1.medium, key pair capi-rs-test-key, external network public, hypervisor up"
}

write_client_files() {
  cat > "$BASE/clouds.yaml" <<EOF
clouds:
  local:
    auth:
      auth_url: $KS
      username: admin
      password: $PW
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
    identity_api_version: 3
EOF
  cat > "$BASE/ports.env" <<EOF
KEYSTONE_PORT=$KEYSTONE_PORT PLACEMENT_PORT=$PLACEMENT_PORT NOVA_PORT=$NOVA_PORT GLANCE_PORT=$GLANCE_PORT
NEUTRON_PORT=$NEUTRON_PORT OCTAVIA_PORT=$OCTAVIA_PORT RABBIT_PORT=$RABBIT_PORT RABBIT_DIST_PORT=$RABBIT_DIST_PORT
EPMD_PORT=$EPMD_PORT PG_PORT=$PG_PORT MYSQL_PORT=$MYSQL_PORT
EOF
}

case "${1:-}" in
install) install ;;
stop) [ -f "$BASE/ports.env" ] && . "$BASE/ports.env"; stop ;;
start)
  [ -e "$BASE" ] && die "$BASE exists: stop the running instance first (local-openstack.sh stop)"
  mkdir -p "$BASE"/{log,pids,keystone,placement,nova/state,nova/lock,glance/images,glance/staging,glance/tasks,neutron/lock,octavia/certs,rabbit,pg,mysql}
  chmod 755 "$BASE"; chmod 1777 "$BASE/log"   # the database users write their logs there too
  write_client_files
  databases; keystone; services; baseline
  touch "$BASE/ready"
  say "ready: clouds.yaml in $BASE/clouds.yaml (cloud \"local\")"
  ;;
*) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
